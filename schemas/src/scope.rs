//! Secret-key scopes (docs/api.md#keys; each route's scope in docs/api.md#routes), plus the
//! removed `organizations:manage` that legacy keys may still carry (docs/architecture.md#scopes).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! scopes {
    ($($variant:ident => $text:literal),* $(,)?) => {
        /// One permission a secret key may hold.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Scope {
            $($variant,)*
            /// Removed: split into `organizations:create/read/update`. A key carrying it must be
            /// rotated before it reaches organization routes again.
            OrganizationsManage,
        }

        impl Scope {
            /// The complete set a secret key can be given, and the default when none is asked for.
            pub const ALL: &'static [Scope] = &[$(Scope::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Scope::$variant => $text,)*
                    Scope::OrganizationsManage => "organizations:manage",
                }
            }

            /// Parses a current scope; the removed one is not accepted from clients.
            pub fn parse(s: &str) -> Option<Scope> {
                match s {
                    $($text => Some(Scope::$variant),)*
                    _ => None,
                }
            }

            /// Parses a stored scope, including the removed one.
            pub fn parse_stored(s: &str) -> Option<Scope> {
                if s == "organizations:manage" {
                    Some(Scope::OrganizationsManage)
                } else {
                    Scope::parse(s)
                }
            }

            pub fn all_names() -> Vec<&'static str> {
                Scope::ALL.iter().map(|s| s.as_str()).collect()
            }
        }
    };
}

scopes! {
    SessionsList => "sessions:list",
    SessionsRead => "sessions:read",
    FingerprintsList => "fingerprints:list",
    FingerprintsRead => "fingerprints:read",
    OrganizationsCreate => "organizations:create",
    OrganizationsRead => "organizations:read",
    OrganizationsUpdate => "organizations:update",
    ApiKeysRead => "api_keys:read",
    ApiKeysManage => "api_keys:manage",
    GateAgentTokensVerify => "gate:agent_tokens:verify",
    GateAgentTokensRevoke => "gate:agent_tokens:revoke",
    GateLoginSessionsConsume => "gate:login_sessions:consume",
    GateServicesRead => "gate:services:read",
    GateServicesManage => "gate:services:manage",
}

impl Scope {
    /// What a rotation turns this scope into: the removed scope becomes its three successors.
    pub fn successors(self) -> &'static [Scope] {
        match self {
            Scope::OrganizationsManage => &[
                Scope::OrganizationsCreate,
                Scope::OrganizationsRead,
                Scope::OrganizationsUpdate,
            ],
            Scope::SessionsList => &[Scope::SessionsList],
            Scope::SessionsRead => &[Scope::SessionsRead],
            Scope::FingerprintsList => &[Scope::FingerprintsList],
            Scope::FingerprintsRead => &[Scope::FingerprintsRead],
            Scope::OrganizationsCreate => &[Scope::OrganizationsCreate],
            Scope::OrganizationsRead => &[Scope::OrganizationsRead],
            Scope::OrganizationsUpdate => &[Scope::OrganizationsUpdate],
            Scope::ApiKeysRead => &[Scope::ApiKeysRead],
            Scope::ApiKeysManage => &[Scope::ApiKeysManage],
            Scope::GateAgentTokensVerify => &[Scope::GateAgentTokensVerify],
            Scope::GateAgentTokensRevoke => &[Scope::GateAgentTokensRevoke],
            Scope::GateLoginSessionsConsume => &[Scope::GateLoginSessionsConsume],
            Scope::GateServicesRead => &[Scope::GateServicesRead],
            Scope::GateServicesManage => &[Scope::GateServicesManage],
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// In the OpenAPI document: one of the scopes' names.
impl utoipa::PartialSchema for Scope {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Scope::ALL.iter().map(|s| s.as_str())))
            .into()
    }
}

impl utoipa::ToSchema for Scope {}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Scope::parse_stored(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown scope `{s}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_complete_set_has_fourteen_scopes_and_round_trips() {
        assert_eq!(Scope::ALL.len(), 14);
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(*s));
        }
        assert_eq!(Scope::parse("organizations:manage"), None);
        assert_eq!(
            Scope::parse_stored("organizations:manage"),
            Some(Scope::OrganizationsManage)
        );
    }

    proptest! {
        #[test]
        fn only_listed_names_parse(s in "[a-z_:]{0,30}") {
            let listed = Scope::all_names().contains(&s.as_str());
            prop_assert_eq!(Scope::parse(&s).is_some(), listed);
        }
    }
}
