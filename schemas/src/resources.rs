//! Resources as they appear on the wire, and the envelopes around them.

use serde::{Deserialize, Serialize};

use crate::credential::{Environment, KeyType};
use crate::ids::{KeyId, OrgId, RequestId};
use crate::scope::Scope;
use crate::time::{self, Timestamp};

/// Organization statuses (docs/architecture.md#organizations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrgStatus {
    Active,
    Suspended,
}

impl OrgStatus {
    pub const ALL: [&'static str; 2] = ["active", "suspended"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(OrgStatus::Active),
            "suspended" => Some(OrgStatus::Suspended),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Organization {
    pub id: OrgId,
    #[schema(value_type = String, pattern = "^organization$")]
    pub object: &'static str,
    pub name: String,
    pub slug: String,
    pub status: OrgStatus,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// API key statuses (docs/architecture.md#api-keys): `active` (including a rotated key inside its
/// grace window), `expired` after the grace window, `revoked` after DELETE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    Active,
    Expired,
    Revoked,
}

/// An API key as the single-key responses show it. List items omit `last_used_at` and
/// `revealed_key` (see [`ApiKeyListItem`]).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApiKey {
    pub id: KeyId,
    #[schema(value_type = String, pattern = "^api_key$")]
    pub object: &'static str,
    #[serde(rename = "type")]
    pub key_type: KeyType,
    pub environment: Environment,
    pub name: String,
    pub status: KeyStatus,
    pub allowed_origins: Vec<String>,
    pub scopes: Vec<Scope>,
    pub rate_limit: u32,
    pub key_preview: String,
    pub display_key: String,
    /// The full credential: always for publishable keys (they are public), for secret keys
    /// only in the create and rotate responses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revealed_key: Option<String>,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_used_at: Option<Timestamp>,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub rotated_at: Option<Timestamp>,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub revoked_at: Option<Timestamp>,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub grace_expires_at: Option<Timestamp>,
}

/// An API key as list responses show it: the interface's list-item member set.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApiKeyListItem {
    pub id: KeyId,
    #[schema(value_type = String, pattern = "^api_key$")]
    pub object: &'static str,
    #[serde(rename = "type")]
    pub key_type: KeyType,
    pub name: String,
    pub environment: Environment,
    pub key_preview: String,
    pub display_key: String,
    pub allowed_origins: Vec<String>,
    pub scopes: Vec<Scope>,
    pub rate_limit: u32,
    pub status: KeyStatus,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub rotated_at: Option<Timestamp>,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub revoked_at: Option<Timestamp>,
    #[serde(serialize_with = "time::ser_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub grace_expires_at: Option<Timestamp>,
}

impl From<ApiKey> for ApiKeyListItem {
    fn from(k: ApiKey) -> Self {
        ApiKeyListItem {
            id: k.id,
            object: k.object,
            key_type: k.key_type,
            name: k.name,
            environment: k.environment,
            key_preview: k.key_preview,
            display_key: k.display_key,
            allowed_origins: k.allowed_origins,
            scopes: k.scopes,
            rate_limit: k.rate_limit,
            status: k.status,
            created_at: k.created_at,
            rotated_at: k.rotated_at,
            revoked_at: k.revoked_at,
            grace_expires_at: k.grace_expires_at,
        }
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Meta {
    // The id itself, spelled as it is serialized: no `String` of its own per answer.
    #[schema(value_type = String)]
    pub request_id: RequestId,
}

/// `{ data, meta }`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Single<T> {
    pub data: T,
    pub meta: Meta,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Pagination {
    pub limit: u32,
    pub has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `{ data: [...], pagination, meta }`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct List<T> {
    pub data: Vec<T>,
    pub pagination: Pagination,
    pub meta: Meta,
}
