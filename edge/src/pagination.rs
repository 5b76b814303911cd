//! Opaque, tamper-evident list cursors (D4): the position of the last item returned, signed
//! with the server's cursor key and bound to the list and the caller's tenancy, so a cursor can
//! neither be forged nor carried to another list or organization. A bad cursor is a 422.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::error::ApiError;
use crate::secrets::ServerSecret;

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
}
