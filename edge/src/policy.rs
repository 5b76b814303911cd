//! Route policies: what each secret-key route demands of the key that calls it. A handler names
//! its policy in its extractor (`SecretKey<ManageApiKeys>`), so the check cannot be forgotten.

use schemas::Scope;

/// Which keys of a suspended organization a route still answers
/// (docs/architecture.md#organizations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhileSuspended {
    /// None: the route acts on the organization's data, which suspension stops.
    Refused,
    /// Every secret key: reading the organization and setting it active again.
    Answered,
    /// Live secret keys only: handling an incident (listing, revoking and rotating keys) must
    /// not wait for the organization to be reactivated, and live is the stronger environment.
    LiveKeysOnly,
}

pub trait RoutePolicy: Send + Sync + 'static {
    /// The scope the key must carry (docs/architecture.md#scopes).
    const SCOPE: Scope;
    /// An organization-management route: refused to keys still carrying the removed
    /// `organizations:manage` scope until they are rotated (docs/architecture.md#scopes).
    const ORGANIZATION_ROUTE: bool;
    /// Changes organization state shared by both environments, so only a live key may
    /// (docs/architecture.md#environments): a leaked test key must not be able to suspend the
    /// organization and stop live scoring.
    const LIVE_ONLY: bool;
    /// Whether the secret keys of a suspended organization reach the route
    /// (docs/architecture.md#organizations).
    const WHILE_SUSPENDED: WhileSuspended;
}

macro_rules! policies {
    ($($(#[$doc:meta])* $name:ident => $scope:ident, organization_route: $org:literal, live_only: $live:literal, while_suspended: $susp:ident;)*) => {
        $(
            $(#[$doc])*
            pub struct $name;
            impl RoutePolicy for $name {
                const SCOPE: Scope = Scope::$scope;
                const ORGANIZATION_ROUTE: bool = $org;
                const LIVE_ONLY: bool = $live;
                const WHILE_SUSPENDED: WhileSuspended = WhileSuspended::$susp;
            }
        )*
    };
}

policies! {
    /// `POST /v1/organizations`.
    CreateOrganization => OrganizationsCreate, organization_route: true, live_only: true, while_suspended: Refused;
    /// `GET /v1/organizations/{organizationId}`.
    ReadOrganization => OrganizationsRead, organization_route: true, live_only: false, while_suspended: Answered;
    /// `PATCH /v1/organizations/{organizationId}`.
    UpdateOrganization => OrganizationsUpdate, organization_route: true, live_only: true, while_suspended: Answered;
    /// `GET .../api-keys` and `GET .../api-keys/{keyId}`.
    ReadApiKeys => ApiKeysRead, organization_route: true, live_only: false, while_suspended: LiveKeysOnly;
    /// Create and update API keys.
    ManageApiKeys => ApiKeysManage, organization_route: true, live_only: false, while_suspended: Refused;
    /// `DELETE .../api-keys/{keyId}`: revoking a leaked key is what an incident needs first.
    RevokeApiKey => ApiKeysManage, organization_route: true, live_only: false, while_suspended: LiveKeysOnly;
    /// `GET /v1/organizations/{organizationId}/events` (scope `organizations:read`). The events
    /// carry sessions' results, which a suspended organization's keys no longer read.
    ListEvents => OrganizationsRead, organization_route: true, live_only: false, while_suspended: Refused;
    /// Reading webhook endpoints (scope `organizations:read`).
    ReadWebhooks => OrganizationsRead, organization_route: true, live_only: false, while_suspended: Refused;
    /// Creating, updating and deleting webhook endpoints (scope `organizations:update`). Each
    /// environment has its own endpoints, so a test key manages the test ones.
    ManageWebhooks => OrganizationsUpdate, organization_route: true, live_only: false, while_suspended: Refused;
    /// `GET /v1/gate/services` and `GET /v1/gate/services/{serviceId}`.
    ReadGateServices => GateServicesRead, organization_route: false, live_only: false, while_suspended: Refused;
    /// Creating, updating and deleting Gate services. Gate state is per environment, so a
    /// test key manages the test services.
    ManageGateServices => GateServicesManage, organization_route: false, live_only: false, while_suspended: Refused;
    /// `POST /v1/gate/agent-tokens/verify`.
    VerifyAgentTokens => GateAgentTokensVerify, organization_route: false, live_only: false, while_suspended: Refused;
    /// `POST /v1/gate/agent-tokens/revoke`: revoking is what an incident needs, suspended or not.
    RevokeAgentTokens => GateAgentTokensRevoke, organization_route: false, live_only: false, while_suspended: Answered;
    /// `POST /v1/gate/login-sessions/consume`.
    ConsumeLoginSessions => GateLoginSessionsConsume, organization_route: false, live_only: false, while_suspended: Refused;
    /// `GET /v1/sessions`.
    ListSessions => SessionsList, organization_route: false, live_only: false, while_suspended: Refused;
    /// `GET /v1/sessions/{sessionId}`.
    ReadSession => SessionsRead, organization_route: false, live_only: false, while_suspended: Refused;
    /// `GET /v1/fingerprints`.
    ListFingerprints => FingerprintsList, organization_route: false, live_only: false, while_suspended: Refused;
    /// `GET /v1/fingerprints/{visitorId}`.
    ReadFingerprint => FingerprintsRead, organization_route: false, live_only: false, while_suspended: Refused;
    /// `POST /v1/handoffs/open` (opening a handoff needs `sessions:read`).
    OpenHandoff => SessionsRead, organization_route: false, live_only: false, while_suspended: Refused;
    /// `POST .../api-keys/{keyId}/rotations`: the way out for a key that still carries the
    /// removed scope, so it is not refused for carrying it.
    RotateApiKey => ApiKeysManage, organization_route: false, live_only: false, while_suspended: LiveKeysOnly;
}
