//! Which partition a key goes to: Kafka's default partitioner (murmur2 of the key bytes, sign
//! bit cleared, modulo the partition count), computed here rather than by librdkafka so both
//! backends agree and any Java or librdkafka (`partitioner=murmur2`) producer writing the same
//! keys would pick the same partitions.

/// Partitions as a log line shows them, in runs: `0-15`, or `0,2,5-7` (given ascending).
pub fn shown(partitions: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &p in partitions {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(p) => *end = p,
            _ => runs.push((p, p)),
        }
    }
    runs.iter()
        .map(|&(start, end)| match start == end {
            true => start.to_string(),
            false => format!("{start}-{end}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// MurmurHash2 as Kafka computes it (`org.apache.kafka.common.utils.Utils.murmur2`, librdkafka's
/// `rd_murmur2`): little-endian words, seed `0x9747b28c`.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Kafka hashes the length as a 32-bit int; keys are far below 4 GiB (MAX_RECORD_BYTES).
    let mut h = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of `key` in a topic of `partitions` partitions (`partitions` > 0).
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    // Kafka's `Utils.toPositive`: clear the sign bit of the Java int.
    (murmur2(key) & 0x7fff_ffff) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librdkafka's `unittest_murmur2` vectors, which it checked against the Java client.
    #[test]
    fn murmur2_matches_kafka() {
        let unaligned = "PreAmbleWillBeRemoved,ThePrePartThatIs";
        let cases: &[(&str, u32)] = &[
            ("kafka", 0xd067_cf64),
            ("giberish123456789", 0x8f55_2b0c),
            ("1234", 0x9fc9_7b14),
            ("234", 0xe7c0_09ca),
            ("34", 0x8739_30da),
            ("4", 0x5a4b_5ca1),
            (unaligned, 0x7842_4f1c),
            (&unaligned[1..], 0x4a62_b377),
            (&unaligned[2..], 0xe0e4_e09e),
            (&unaligned[3..], 0x62b8_b43f),
            ("", 0x106e_08d9),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key.as_bytes()), *expected, "murmur2({key:?})");
        }
    }

    #[test]
    fn partitions_are_in_range_and_spread() {
        let mut seen = [0u32; 8];
        for i in 0..8000 {
            let p = partition_for(format!("sid_{i}").as_bytes(), 8);
            seen[p as usize] += 1;
        }
        // Roughly uniform: no partition gets under half or over double its share.
        assert!(seen.iter().all(|n| (500..2000).contains(n)), "{seen:?}");
        assert_eq!(partition_for(b"anything", 1), 0);
    }

    #[test]
    fn partitions_are_shown_in_runs() {
        assert_eq!(shown(&[]), "");
        assert_eq!(shown(&(0..16).collect::<Vec<_>>()), "0-15");
        assert_eq!(shown(&[0, 2, 5, 6, 7]), "0,2,5-7");
        assert_eq!(
            shown(&[u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
    }
}
