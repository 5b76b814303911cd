//! Where a session's address is, as the operator's IP data says (docs/detection.md#network-identity):
//! the facts the processor looks up once per session and keeps in its state, and the VPN
//! judgement it makes of them with the browser's claims. The query API shows both in a session's
//! `network` member; the sessions export flattens them.
//!
//! Every member is absent when the data that would give it is not configured: Vigil never
//! guesses. `hosting` needs an ASN (a database that has one); `tor_exit` and `relay` need their
//! lists.

use serde::{Deserialize, Serialize};

/// What the operator's IP data says of one address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct NetworkFacts {
    #[schema(required = true)]
    pub asn: Option<AsnFacts>,
    /// ISO 3166-1 alpha-2, upper case.
    #[schema(required = true)]
    pub country: Option<String>,
    #[schema(required = true)]
    pub city: Option<String>,
    /// The IANA time zone of the address's location.
    #[schema(required = true)]
    pub ip_timezone: Option<String>,
    /// Whether the ASN is a hosting or cloud provider's (the shipped list, or
    /// `--hosting-asns`); null without an ASN.
    #[schema(required = true)]
    pub hosting: Option<bool>,
    /// The provider's name, when `hosting` is true.
    #[schema(required = true)]
    pub hosting_provider: Option<String>,
    /// Whether the address is a Tor exit (`--tor-exit-list`); null without the list.
    #[schema(required = true)]
    pub tor_exit: Option<bool>,
    /// Whether the address is a relay's egress (`--relay-list`); null without the list. Shown
    /// as the `relay` method of `vpn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub relay: Option<bool>,
}

/// An autonomous system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AsnFacts {
    pub number: u32,
    #[schema(required = true)]
    pub organization: Option<String>,
}

impl NetworkFacts {
    /// Whether any source said anything: facts with every member absent are shown as none.
    pub fn is_empty(&self) -> bool {
        *self == NetworkFacts::default()
    }
}

/// Whether the session looks like it came through a VPN or relay, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Vpn {
    /// True when any method holds.
    pub result: bool,
    /// Null when `result` is false.
    #[schema(required = true)]
    pub confidence: Option<VpnConfidence>,
    pub methods: VpnMethods,
}

/// How sure the VPN judgement is: `high` for a listed relay or both other methods, `medium`
/// for a desktop browser on a hosting network, `low` for a time zone alone (travellers and
/// misset clocks have one too).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum VpnConfidence {
    Low,
    Medium,
    High,
}

/// Each way of telling a VPN, and whether it held; one that could not be judged (its data
/// absent) is false.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct VpnMethods {
    /// The browser's IANA zone lies in no country that is the address's, by the tz database's
    /// zone-to-country table.
    pub timezone_mismatch: bool,
    /// A desktop browser on a hosting or cloud network.
    pub hosting_desktop: bool,
    /// The address is in the operator's relay list.
    pub relay: bool,
}

impl Vpn {
    /// The judgement of the methods that held.
    pub fn of(methods: VpnMethods) -> Vpn {
        let VpnMethods {
            timezone_mismatch,
            hosting_desktop,
            relay,
        } = methods;
        let result = timezone_mismatch || hosting_desktop || relay;
        let confidence = if relay || (timezone_mismatch && hosting_desktop) {
            VpnConfidence::High
        } else if hosting_desktop {
            VpnConfidence::Medium
        } else {
            VpnConfidence::Low
        };
        Vpn {
            result,
            confidence: result.then_some(confidence),
            methods,
        }
    }
}
