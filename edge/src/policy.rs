//! Route policies: what each secret-key route demands of the key that calls it. A handler names
//! its policy in its extractor (`SecretKey<ManageApiKeys>`), so the check cannot be forgotten.

use schemas::Scope;

pub trait RoutePolicy: Send + Sync + 'static {
    /// The scope the key must carry (D3).
    const SCOPE: Scope;
    /// An organization-management route: refused to keys still carrying the removed
    /// `organizations:manage` scope until they are rotated (interface rule 4).
    const ORGANIZATION_ROUTE: bool;
    /// Reachable by the secret keys of a suspended organization (D8: they can still read the
    /// organization and PATCH it back to active).
    const WHILE_SUSPENDED: bool;
}

macro_rules! policies {
    ($($(#[$doc:meta])* $name:ident => $scope:ident, organization_route: $org:literal, while_suspended: $susp:literal;)*) => {
        $(
            $(#[$doc])*
            pub struct $name;
            impl RoutePolicy for $name {
                const SCOPE: Scope = Scope::$scope;
                const ORGANIZATION_ROUTE: bool = $org;
                const WHILE_SUSPENDED: bool = $susp;
            }
        )*
    };
}

policies! {
    /// `POST /v1/organizations`.
    CreateOrganization => OrganizationsCreate, organization_route: true, while_suspended: false;
    /// `GET /v1/organizations/{organizationId}`.
    ReadOrganization => OrganizationsRead, organization_route: true, while_suspended: true;
    /// `PATCH /v1/organizations/{organizationId}`.
    UpdateOrganization => OrganizationsUpdate, organization_route: true, while_suspended: true;
    /// `GET .../api-keys` and `GET .../api-keys/{keyId}`.
    ReadApiKeys => ApiKeysRead, organization_route: true, while_suspended: false;
    /// Create, update and revoke API keys.
    ManageApiKeys => ApiKeysManage, organization_route: true, while_suspended: false;
    /// `GET /v1/sessions` (D3).
    ListSessions => SessionsList, organization_route: false, while_suspended: false;
    /// `GET /v1/sessions/{sessionId}` (D3).
    ReadSession => SessionsRead, organization_route: false, while_suspended: false;
    /// `GET /v1/fingerprints` (D3).
    ListFingerprints => FingerprintsList, organization_route: false, while_suspended: false;
    /// `GET /v1/fingerprints/{visitorId}` (D3).
    ReadFingerprint => FingerprintsRead, organization_route: false, while_suspended: false;
    /// `POST /v1/handoffs/open` (D3: opening a handoff needs `sessions:read`).
    OpenHandoff => SessionsRead, organization_route: false, while_suspended: false;
    /// `POST .../api-keys/{keyId}/rotations`: the way out for a key that still carries the
    /// removed scope, so it is not refused for carrying it.
    RotateApiKey => ApiKeysManage, organization_route: false, while_suspended: false;
}
