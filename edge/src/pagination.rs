//! Opaque, tamper-evident list cursors (docs/architecture.md#lists): the position of the last item
//! returned, signed with the server's cursor key and bound to the list and the caller's tenancy, so
//! a cursor can neither be forged nor carried to another list or organization. A bad cursor is a
//! 422.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::error::ApiError;
use secrets::ServerSecret;

const MAC_LEN: usize = 16;

/// `position` is the list's own resume point (such as the last id); `binding` names the list
/// and the tenancy it belongs to.
pub fn encode_cursor(secret: &ServerSecret, binding: &str, position: &str) -> String {
    let mac = secret.cursor_mac(&[binding.as_bytes(), b"\0", position.as_bytes()]);
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(position),
        URL_SAFE_NO_PAD.encode(&mac[..MAC_LEN])
    )
}

/// The position inside a cursor made by `encode_cursor` for the same binding.
pub fn decode_cursor(
    secret: &ServerSecret,
    binding: &str,
    cursor: &str,
) -> Result<String, ApiError> {
    let invalid = || {
        ApiError::invalid_field(
            "cursor",
            "is not a cursor issued for this list",
            Some(Value::String(cursor.into())),
        )
        .with_parameter_set("query")
    };
    let (pos, mac) = cursor.split_once('.').ok_or_else(invalid)?;
    let pos = URL_SAFE_NO_PAD.decode(pos).map_err(|_| invalid())?;
    let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| invalid())?;
    let expected = secret.cursor_mac(&[binding.as_bytes(), b"\0", &pos]);
    // Constant-time comparison: a cursor MAC must not be guessable byte by byte.
    let same = mac.len() == MAC_LEN
        && mac
            .iter()
            .zip(&expected[..MAC_LEN])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return Err(invalid());
    }
    String::from_utf8(pos).map_err(|_| invalid())
}

impl crate::body::QueryParams {
    /// `cursor=`, checked as one issued for the list `binding` names, and its position read.
    /// A position that does not parse was signed by this server yet not made by this list: a
    /// bug, so a 500.
    pub fn cursor<P>(&self, secret: &ServerSecret, binding: &str) -> Result<Option<P>, ApiError>
    where
        P: std::str::FromStr<Err: std::fmt::Display>,
    {
        let Some(cursor) = self.get("cursor") else {
            return Ok(None);
        };
        let position = decode_cursor(secret, binding, cursor)?;
        position
            .parse::<P>()
            .map(Some)
            .map_err(|e| ApiError::internal("cursor position", e))
    }
}

/// One page of a list as [`scan_page`] read it.
pub struct Scanned<T, P> {
    /// At most `limit` rows, in the list's order.
    pub rows: Vec<T>,
    pub has_more: bool,
    /// Where the next page resumes, when `has_more`.
    pub next: Option<P>,
}

/// Reads one page of a list from the store's pages of it, which `fetch(after, n)` reads (at
/// most `n` rows strictly after position `after`), keeping the rows `keep` accepts.
///
/// Unfiltered, one row past the page says whether more follow. Filtered, at most `budget`
/// stored rows are read, so a filter that matches little cannot make one request scan a whole
/// partition: the page may then be short, with `has_more` if rows remain past the last one
/// read and the cursor resuming there.
pub async fn scan_page<T, P: Clone, E, Fetched: Future<Output = Result<Vec<T>, E>>>(
    limit: usize,
    filtered: bool,
    budget: usize,
    mut after: Option<P>,
    mut fetch: impl FnMut(Option<P>, usize) -> Fetched,
    position: impl Fn(&T) -> P,
    keep: impl Fn(&T) -> bool,
) -> Result<Scanned<T, P>, E> {
    let mut rows: Vec<T> = Vec::with_capacity(limit + 1);
    let mut scanned = 0;
    let mut exhausted = false;
    while rows.len() <= limit && scanned < budget {
        let want = if filtered {
            200.min(budget - scanned)
        } else {
            limit + 1 - rows.len()
        };
        let page = fetch(after.clone(), want).await?;
        exhausted = page.len() < want;
        for row in page {
            scanned += 1;
            after = Some(position(&row));
            if keep(&row) {
                rows.push(row);
                if rows.len() > limit {
                    break;
                }
            }
        }
        if exhausted {
            break;
        }
    }
    let (has_more, next) = if rows.len() > limit {
        rows.truncate(limit);
        (true, rows.last().map(&position))
    } else if exhausted {
        (false, None)
    } else {
        // The budget ran out: more follow if rows exist past the last one read.
        let probe = fetch(after.clone(), 1).await?;
        (!probe.is_empty(), after)
    };
    Ok(Scanned {
        rows,
        has_more,
        next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_tampering_and_other_lists() {
        let s = ServerSecret::from_bytes([7; 32]);
        let c = encode_cursor(&s, "api_keys:org_1:live", "key_01abc");
        assert_eq!(
            decode_cursor(&s, "api_keys:org_1:live", &c).unwrap(),
            "key_01abc"
        );
        assert!(decode_cursor(&s, "api_keys:org_2:live", &c).is_err());
        let mut tampered = c.clone();
        tampered.replace_range(0..1, if c.starts_with('a') { "b" } else { "a" });
        assert!(decode_cursor(&s, "api_keys:org_1:live", &tampered).is_err());
        assert!(decode_cursor(&s, "api_keys:org_1:live", "garbage").is_err());
    }

    /// A list of the numbers `0..n`, read in store pages after a position.
    async fn numbers(n: u32, after: Option<u32>, want: usize) -> Result<Vec<u32>, ()> {
        let from = after.map_or(0, |a| a + 1);
        Ok((from..n).take(want).collect())
    }

    #[tokio::test]
    async fn pages_are_full_and_say_exactly_whether_more_follow() {
        let read = |after, limit, keep: fn(&u32) -> bool, filtered| {
            scan_page(
                limit,
                filtered,
                50,
                after,
                |a, w| numbers(10, a, w),
                |n| *n,
                keep,
            )
        };
        let all = read(None, 4, |_| true, false).await.unwrap();
        assert_eq!(
            (all.rows, all.has_more, all.next),
            (vec![0, 1, 2, 3], true, Some(3))
        );
        let last = read(Some(5), 4, |_| true, false).await.unwrap();
        assert_eq!(
            (last.rows, last.has_more, last.next),
            (vec![6, 7, 8, 9], false, None)
        );
        let even = read(None, 3, |n| n % 2 == 0, true).await.unwrap();
        assert_eq!(
            (even.rows, even.has_more, even.next),
            (vec![0, 2, 4], true, Some(4))
        );
        let tail = read(Some(4), 3, |n| n % 2 == 0, true).await.unwrap();
        assert_eq!(
            (tail.rows, tail.has_more, tail.next),
            (vec![6, 8], false, None)
        );
    }

    #[tokio::test]
    async fn a_filter_reads_at_most_its_budget_and_resumes_after_it() {
        // Nothing matches below 120; a budget of 50 stops the scan at 49 with more to come.
        let page = scan_page(
            5,
            true,
            50,
            None,
            |a, w| numbers(200, a, w),
            |n| *n,
            |n| *n >= 120,
        )
        .await
        .unwrap();
        assert_eq!(
            (page.rows, page.has_more, page.next),
            (vec![], true, Some(49))
        );
    }
}
