//! `POST /v1/organizations`, `GET` and `PATCH /v1/organizations/{organizationId}`: handlers,
//! their validation, and organization creation shared with the operator CLI.

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use edge::body::PathParams;
use edge::body::{Fields, JsonObject, Reply};
use edge::policy::{CreateOrganization, ReadOrganization, UpdateOrganization};
use edge::{ApiError, SecretKey};
use schemas::resources::{OrgStatus, Organization};
use schemas::{OrgId, validate};
use store::{OrganizationRecord, Store, StoreError};

use crate::{AdminState, own_organization};

pub fn router() -> Router<AdminState> {
    Router::new()
        .route("/v1/organizations", post(create))
        .route(
            "/v1/organizations/{organizationId}",
            get(read).patch(update),
        )
}

pub fn resource(org: &OrganizationRecord) -> Organization {
    Organization {
        id: org.id,
        object: "organization",
        name: org.name.clone(),
        slug: org.slug.clone(),
        status: org.status,
        created_at: org.created_at,
        updated_at: org.updated_at,
    }
}

/// Creates an active organization; a taken slug is a 409.
pub async fn create_organization(
    store: &Store,
    name: String,
    slug: String,
) -> Result<OrganizationRecord, ApiError> {
    let org = new_organization(name, slug);
    store
        .create_organization(&org)
        .await
        .map_err(|e| slug_conflict(e, &org.slug))?;
    Ok(org)
}

/// An active organization, not yet written.
pub fn new_organization(name: String, slug: String) -> OrganizationRecord {
    let now = schemas::time::now();
    OrganizationRecord {
        id: OrgId::generate(),
        name,
        slug,
        status: OrgStatus::Active,
        created_at: now,
        updated_at: now,
    }
}

/// A store conflict on creating an organization is its slug being taken.
pub fn slug_conflict(e: StoreError, slug: &str) -> ApiError {
    match e {
        StoreError::Conflict(_) => ApiError::new(
            schemas::ErrorCode::Conflict,
            format!("the slug `{slug}` is already taken"),
        ),
        other => other.into(),
    }
}

async fn create(
    State(state): State<AdminState>,
    _caller: SecretKey<CreateOrganization>,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let mut f = Fields::new(body);
    let name = f.checked_string("name", true, validate::name);
    let slug = f.checked_string("slug", true, validate::slug);
    f.finish()?;
    let (Some(name), Some(slug)) = (name, slug) else {
        return Err(ApiError::internal(
            "organization create",
            "validated fields missing",
        ));
    };
    let org = create_organization(&state.auth.store, name, slug).await?;
    Ok(Reply::created(resource(&org)))
}

async fn read(caller: SecretKey<ReadOrganization>, params: PathParams) -> Result<Reply, ApiError> {
    own_organization(&caller, &params)?;
    Ok(Reply::ok(resource(&caller.organization)))
}

async fn update(
    State(state): State<AdminState>,
    caller: SecretKey<UpdateOrganization>,
    params: PathParams,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let id = own_organization(&caller, &params)?;
    let mut f = Fields::new(body);
    let name = f.checked_string("name", false, validate::name);
    let status = f.enumerated("status", false, &OrgStatus::ALL, OrgStatus::parse);
    f.forbid("slug", "is immutable after creation");
    f.finish()?;
    // Re-read so that the update applies to the stored row, not the one seen at authentication.
    let mut org = state
        .auth
        .store
        .get_organization(id)
        .await?
        .ok_or_else(|| ApiError::not_found("organization"))?;
    if name.is_some() || status.is_some() {
        org.name = name.unwrap_or(org.name);
        org.status = status.unwrap_or(org.status);
        org.updated_at = schemas::time::now();
        state.auth.store.update_organization(&org).await?;
    }
    Ok(Reply::ok(resource(&org)))
}
