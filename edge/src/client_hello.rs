//! The TLS client as its ClientHello shows it (docs/detection.md#transport-identity): the
//! hello parsed from the bytes a client sent before the handshake, its JA4 fingerprint (FoxIO's
//! method, BSD-3-Clause: <https://github.com/FoxIO-LLC/ja4>) in the hashed and the raw form, and
//! the structure `tls_client_mismatch` judges (GREASE, the counts, the ALPN offered, the
//! extensions browsers always send).
//!
//! JA4 in brief: `a_b_c`. `a` is the protocol (`t`, TLS over TCP), the highest version offered
//! (`supported_versions`, else the hello's own), `d` with a server name or `i` without, the
//! cipher and extension counts (two digits each, GREASE left out) and the first and last
//! characters of the first ALPN offered (`00` without). `b` is the first 12 hex digits of the
//! SHA-256 of the ciphers, sorted, as 4-digit hex joined by commas. `c` is the same of the
//! extensions, sorted, without the server name and ALPN, then `_` and the signature algorithms
//! in the order offered. Sorting makes a browser that shuffles its extensions (Chromium since
//! 110) one fingerprint.

use sha2::{Digest, Sha256};

/// The parts of a ClientHello the fingerprint and the judgement read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The hello's own version (`legacy_version`).
    pub version: u16,
    /// In the order offered, GREASE included.
    pub ciphers: Vec<u16>,
    /// Extension types in the order offered, GREASE included.
    pub extensions: Vec<u16>,
    pub server_name: bool,
    /// The ALPN protocols offered, in order.
    pub alpn: Vec<Vec<u8>>,
    /// `supported_versions`, in order, GREASE included.
    pub supported_versions: Vec<u16>,
    /// `signature_algorithms`, in order.
    pub signature_algorithms: Vec<u16>,
}

/// Why bytes are not (yet) a ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloError {
    /// More bytes are needed: the hello is not all there yet.
    Incomplete,
    /// Not a TLS ClientHello.
    Malformed,
}

const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 0x01;
const SERVER_NAME: u16 = 0x0000;
const SIGNATURE_ALGORITHMS: u16 = 0x000d;
const ALPN: u16 = 0x0010;
const SUPPORTED_VERSIONS: u16 = 0x002b;

/// TLS's GREASE values (RFC 8701): `0x0a0a`, `0x1a1a`, … `0xfafa`.
pub fn is_grease(value: u16) -> bool {
    value & 0x0f0f == 0x0a0a && value >> 8 == value & 0xff
}

/// A cursor over bytes that fails as [`HelloError::Malformed`] when it runs out: the hello's
/// own lengths say where it ends, so running out inside it is a lie, not a short read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, HelloError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, HelloError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a length prefix of `width` bytes.
    fn vector(&mut self, width: usize) -> Result<Reader<'a>, HelloError> {
        let len = match width {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        Ok(Reader(self.take(len)?))
    }

    fn u16s(mut self) -> Result<Vec<u16>, HelloError> {
        let mut out = Vec::with_capacity(self.0.len() / 2);
        while !self.0.is_empty() {
            out.push(self.u16()?);
        }
        Ok(out)
    }
}

/// The handshake message carried by the TLS records at the start of `bytes` (one hello may
/// span several records), or why there is none yet.
fn handshake_message(mut bytes: &[u8]) -> Result<Vec<u8>, HelloError> {
    let mut message = Vec::new();
    loop {
        if bytes.len() < 5 {
            return Err(HelloError::Incomplete);
        }
        if bytes[0] != HANDSHAKE {
            return Err(HelloError::Malformed);
        }
        let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        if bytes.len() < 5 + len {
            return Err(HelloError::Incomplete);
        }
        message.extend_from_slice(&bytes[5..5 + len]);
        bytes = &bytes[5 + len..];
        if message.len() >= 4 {
            if message[0] != CLIENT_HELLO {
                return Err(HelloError::Malformed);
            }
            let body = usize::from(message[1]) << 16
                | usize::from(message[2]) << 8
                | usize::from(message[3]);
            if message.len() >= 4 + body {
                message.truncate(4 + body);
                return Ok(message);
            }
        }
    }
}

impl ClientHello {
    /// The ClientHello at the start of what a client sent.
    pub fn parse(bytes: &[u8]) -> Result<Self, HelloError> {
        let message = handshake_message(bytes)?;
        let mut r = Reader(&message[4..]);
        let version = r.u16()?;
        r.take(32)?; // random
        r.vector(1)?; // session id
        let ciphers = r.vector(2)?.u16s()?;
        r.vector(1)?; // compression methods
        let mut hello = ClientHello {
            version,
            ciphers,
            extensions: Vec::new(),
            server_name: false,
            alpn: Vec::new(),
            supported_versions: Vec::new(),
            signature_algorithms: Vec::new(),
        };
        // A hello without extensions (SSL 3.0 style) ends here.
        if r.0.is_empty() {
            return Ok(hello);
        }
        let mut extensions = r.vector(2)?;
        while !extensions.0.is_empty() {
            let kind = extensions.u16()?;
            let mut data = extensions.vector(2)?;
            hello.extensions.push(kind);
            match kind {
                SERVER_NAME => hello.server_name = true,
                ALPN => {
                    let mut names = data.vector(2)?;
                    while !names.0.is_empty() {
                        hello.alpn.push(names.vector(1)?.0.to_vec());
                    }
                }
                SUPPORTED_VERSIONS => hello.supported_versions = data.vector(1)?.u16s()?,
                SIGNATURE_ALGORITHMS => hello.signature_algorithms = data.vector(2)?.u16s()?,
                _ => {}
            }
        }
        Ok(hello)
    }

    /// The highest version offered, GREASE aside: `supported_versions` where sent.
    pub fn offered_version(&self) -> u16 {
        self.supported_versions
            .iter()
            .copied()
            .filter(|v| !is_grease(*v))
            .max()
            .unwrap_or(self.version)
    }

    /// Whether the hello carries GREASE values (among its ciphers or extensions), as
    /// Chromium's and Safari's do and OpenSSL's never does.
    pub fn greased(&self) -> bool {
        self.ciphers
            .iter()
            .chain(&self.extensions)
            .any(|v| is_grease(*v))
    }

    fn ciphers_sorted(&self) -> Vec<u16> {
        let mut ciphers: Vec<u16> = self
            .ciphers
            .iter()
            .copied()
            .filter(|c| !is_grease(*c))
            .collect();
        ciphers.sort_unstable();
        ciphers
    }

    /// The extensions `c` hashes: sorted, without GREASE, the server name or ALPN.
    fn extensions_hashed(&self) -> Vec<u16> {
        let mut extensions: Vec<u16> = self
            .extensions
            .iter()
            .copied()
            .filter(|e| !is_grease(*e) && *e != SERVER_NAME && *e != ALPN)
            .collect();
        extensions.sort_unstable();
        extensions
    }

    /// The ciphers offered, GREASE aside.
    pub fn cipher_count(&self) -> usize {
        self.ciphers.iter().filter(|c| !is_grease(**c)).count()
    }

    /// The extensions offered, GREASE aside (the server name and ALPN counted).
    pub fn extension_count(&self) -> usize {
        self.extensions.iter().filter(|e| !is_grease(**e)).count()
    }

    /// JA4's first part: `t13d1516h2`.
    fn ja4_a(&self) -> String {
        let version = match self.offered_version() {
            0x0304 => "13",
            0x0303 => "12",
            0x0302 => "11",
            0x0301 => "10",
            0x0300 => "s3",
            0x0002 => "s2",
            0xfeff => "d1",
            0xfefd => "d2",
            0xfefc => "d3",
            _ => "00",
        };
        let sni = if self.server_name { 'd' } else { 'i' };
        format!(
            "t{version}{sni}{:02}{:02}{}",
            self.cipher_count().min(99),
            self.extension_count().min(99),
            alpn_code(self.alpn.first().map(Vec::as_slice))
        )
    }

    /// The raw `c` before hashing: the extensions, then `_` and the signature algorithms when
    /// there are any.
    fn ja4_c_raw(&self) -> String {
        let extensions = hex_list(&self.extensions_hashed());
        if self.signature_algorithms.is_empty() {
            extensions
        } else {
            format!("{extensions}_{}", hex_list(&self.signature_algorithms))
        }
    }

    /// The JA4 fingerprint: `t13d1516h2_8daaf6152771_02713d6af862`.
    pub fn ja4(&self) -> String {
        let ciphers = self.ciphers_sorted();
        let b = if ciphers.is_empty() {
            "000000000000".to_owned()
        } else {
            truncated_sha256(&hex_list(&ciphers))
        };
        let c = if self.extensions_hashed().is_empty() {
            "000000000000".to_owned()
        } else {
            truncated_sha256(&self.ja4_c_raw())
        };
        format!("{}_{b}_{c}", self.ja4_a())
    }

    /// JA4's raw form (`ja4_r`): the same parts unhashed.
    pub fn ja4_r(&self) -> String {
        format!(
            "{}_{}_{}",
            self.ja4_a(),
            hex_list(&self.ciphers_sorted()),
            self.ja4_c_raw()
        )
    }
}

/// Whether `text` has a JA4's shape (`t13d1516h2_8daaf6152771_02713d6af862`), as a proxy's
/// header must to be believed.
pub fn is_ja4(text: &str) -> bool {
    let mut parts = text.split('_');
    let (Some(a), Some(b), Some(c), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let hex12 = |p: &str| p.len() == 12 && p.bytes().all(|b| b.is_ascii_hexdigit());
    a.len() == 10
        && a.is_ascii()
        && a.bytes().all(|b| b.is_ascii_alphanumeric())
        && hex12(b)
        && hex12(c)
}

/// The longest raw form kept: a browser's is about 300 bytes, and a hello of 16 KiB could make
/// one of 40 KB, copied into every batch record of the connection.
const MAX_JA4_R_BYTES: usize = 1024;

/// What the listener keeps of a connection's hello: its fingerprint and whether it was
/// greased, with the version and protocol the handshake settled on; the raw form only when it
/// is of a browser's size.
pub fn tls_client(
    hello: &ClientHello,
    tls_version: Option<String>,
    alpn: Option<String>,
) -> schemas::collect::TlsClient {
    schemas::collect::TlsClient {
        ja4: Some(hello.ja4()),
        ja4_r: Some(hello.ja4_r()).filter(|r| r.len() <= MAX_JA4_R_BYTES),
        greased: Some(hello.greased()),
        tls_version,
        alpn,
        source: "listener".to_owned(),
    }
}

/// JA4's ALPN code: the first and last characters of the first protocol offered, or of its hex
/// form when either is not alphanumeric; `00` without ALPN.
fn alpn_code(first: Option<&[u8]>) -> String {
    let Some(alpn) = first.filter(|a| !a.is_empty()) else {
        return "00".to_owned();
    };
    let (head, tail) = (alpn[0], alpn[alpn.len() - 1]);
    if head.is_ascii_alphanumeric() && tail.is_ascii_alphanumeric() {
        format!("{}{}", char::from(head), char::from(tail))
    } else {
        let hex = hex::encode(alpn);
        let hex = hex.as_bytes();
        format!("{}{}", char::from(hex[0]), char::from(hex[hex.len() - 1]))
    }
}

fn hex_list(values: &[u16]) -> String {
    values
        .iter()
        .map(|v| format!("{v:04x}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn truncated_sha256(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    hex::encode(&digest[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hello as the wire carries it, from its parts.
    fn hello_bytes(
        ciphers: &[u16],
        extensions: &[(u16, Vec<u8>)],
        split_at: Option<usize>,
    ) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.push(0);
        body.extend(u16::try_from(ciphers.len() * 2).unwrap().to_be_bytes());
        for c in ciphers {
            body.extend(c.to_be_bytes());
        }
        body.extend([1, 0]);
        let mut exts = Vec::new();
        for (kind, data) in extensions {
            exts.extend(kind.to_be_bytes());
            exts.extend(u16::try_from(data.len()).unwrap().to_be_bytes());
            exts.extend(data);
        }
        body.extend(u16::try_from(exts.len()).unwrap().to_be_bytes());
        body.extend(exts);
        let mut message = vec![CLIENT_HELLO, 0];
        message.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
        message.extend(body);
        let record = |payload: &[u8]| {
            let mut r = vec![HANDSHAKE, 3, 1];
            r.extend(u16::try_from(payload.len()).unwrap().to_be_bytes());
            r.extend(payload);
            r
        };
        match split_at {
            None => record(&message),
            Some(at) => [record(&message[..at]), record(&message[at..])].concat(),
        }
    }

    fn alpn(names: &[&[u8]]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(u8::try_from(n.len()).unwrap());
            list.extend(*n);
        }
        [
            u16::try_from(list.len()).unwrap().to_be_bytes().to_vec(),
            list,
        ]
        .concat()
    }

    fn u16_vector(width: usize, values: &[u16]) -> Vec<u8> {
        let mut out = match width {
            1 => vec![u8::try_from(values.len() * 2).unwrap()],
            _ => u16::try_from(values.len() * 2)
                .unwrap()
                .to_be_bytes()
                .to_vec(),
        };
        for v in values {
            out.extend(v.to_be_bytes());
        }
        out
    }

    /// A greased TLS 1.3 hello with a server name, h2, and signature algorithms.
    fn browser_like(split_at: Option<usize>) -> Vec<u8> {
        hello_bytes(
            &[0x2a2a, 0x1301, 0x1302, 0x1303, 0xc02b],
            &[
                (0x3a3a, vec![]),
                (SERVER_NAME, vec![0; 5]),
                (ALPN, alpn(&[b"h2", b"http/1.1"])),
                (0x001b, vec![2, 0, 2]),
                (SUPPORTED_VERSIONS, u16_vector(1, &[0x5a5a, 0x0304, 0x0303])),
                (
                    SIGNATURE_ALGORITHMS,
                    u16_vector(2, &[0x0403, 0x0804, 0x0401]),
                ),
                (0x000a, vec![0, 2, 0, 0x1d]),
            ],
            split_at,
        )
    }

    #[test]
    fn a_greased_hello_is_counted_and_hashed_without_its_grease() {
        let hello = ClientHello::parse(&browser_like(None)).unwrap();
        assert!(hello.greased());
        assert_eq!(hello.offered_version(), 0x0304);
        assert_eq!(
            hello.ja4_r(),
            "t13d0406h2_1301,1302,1303,c02b_000a,000d,001b,002b_0403,0804,0401"
        );
        let ja4 = hello.ja4();
        let (a, rest) = ja4.split_once('_').unwrap();
        assert_eq!(a, "t13d0406h2");
        let (b, c) = rest.split_once('_').unwrap();
        assert_eq!(b, truncated_sha256("1301,1302,1303,c02b"));
        assert_eq!(c, truncated_sha256("000a,000d,001b,002b_0403,0804,0401"));
        assert_eq!(b.len(), 12);
    }

    /// The worked example of FoxIO's JA4 specification (a Chromium hello): fifteen ciphers,
    /// sixteen extensions counting the server name and ALPN, eight signature algorithms.
    #[test]
    fn the_specifications_example_gives_its_fingerprint() {
        let ciphers = [
            0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
            0x009c, 0x009d, 0x002f, 0x0035,
        ];
        let others: [u16; 11] = [
            0x0005, 0x000a, 0x000b, 0x0012, 0x0015, 0x0017, 0x001b, 0x0023, 0x002d, 0x0033, 0x4469,
        ];
        let mut extensions: Vec<(u16, Vec<u8>)> = vec![
            (SERVER_NAME, vec![0; 5]),
            (ALPN, alpn(&[b"h2", b"http/1.1"])),
            (SUPPORTED_VERSIONS, u16_vector(1, &[0x0304, 0x0303])),
            (
                SIGNATURE_ALGORITHMS,
                u16_vector(
                    2,
                    &[
                        0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
                    ],
                ),
            ),
            (0xff01, vec![0]),
        ];
        extensions.extend(others.iter().map(|e| (*e, vec![])));
        let hello = ClientHello::parse(&hello_bytes(&ciphers, &extensions, None)).unwrap();
        assert_eq!(hello.ja4(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
    }

    #[test]
    fn a_hello_split_over_two_records_reads_as_one_and_a_short_one_asks_for_more() {
        let whole = browser_like(None);
        let split = browser_like(Some(40));
        assert_eq!(
            ClientHello::parse(&split).unwrap(),
            ClientHello::parse(&whole).unwrap()
        );
        for cut in [0, 3, 5, 60, whole.len() - 1] {
            assert_eq!(
                ClientHello::parse(&whole[..cut]),
                Err(HelloError::Incomplete),
                "{cut}"
            );
        }
        assert_eq!(
            ClientHello::parse(b"GET / HTTP/1.1\r\n"),
            Err(HelloError::Malformed)
        );
    }

    #[test]
    fn the_alpn_code_takes_hex_for_what_is_not_alphanumeric_and_00_for_none() {
        assert_eq!(alpn_code(Some(b"h2")), "h2");
        assert_eq!(alpn_code(Some(b"http/1.1")), "h1");
        assert_eq!(alpn_code(Some(&[0xab, 0x01])), "a1");
        assert_eq!(alpn_code(None), "00");
        let plain = hello_bytes(&[0x1301], &[(0x000a, vec![0, 2, 0, 0x1d])], None);
        let hello = ClientHello::parse(&plain).unwrap();
        assert!(!hello.greased());
        assert_eq!(hello.ja4_r(), "t12i010100_1301_000a");
        assert!(hello.ja4().starts_with("t12i010100_"), "{}", hello.ja4());
    }

    #[test]
    fn only_a_ja4_shaped_header_is_believed() {
        assert!(is_ja4("t13d1516h2_8daaf6152771_02713d6af862"));
        for not in [
            "",
            "t13d1516h2_8daaf6152771",
            "t13d1516h2_8daaf6152771_02713d6af86z",
            "t13d1516h2_8daaf6152771_02713d6af862_x",
            "<script>_8daaf6152771_02713d6af862",
        ] {
            assert!(!is_ja4(not), "{not}");
        }
    }

    #[test]
    fn grease_is_the_sixteen_rfc_values() {
        let grease: Vec<u16> = (0..=u16::MAX).filter(|v| is_grease(*v)).collect();
        assert_eq!(grease.len(), 16);
        assert_eq!(grease[0], 0x0a0a);
        assert_eq!(grease[15], 0xfafa);
    }
}
