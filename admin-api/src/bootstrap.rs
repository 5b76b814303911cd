//! An organization with its four keys (live and test, secret and publishable), as
//! `vigil bootstrap` prints it and as the development organization is written to
//! `<data-dir>/credentials.json` on first start.

use edge::ApiError;
use schemas::Scope;
use schemas::credential::{Environment, KeyType};
use secrets::ServerSecret;
use serde::Serialize;
use store::Store;

use crate::api_keys::{KeySpec, mint};
use crate::organizations::{new_organization, resource, slug_conflict};

#[derive(Debug, Serialize)]
pub struct BootstrapKeys {
    pub secret_live: String,
    pub secret_test: String,
    pub publishable_live: String,
    pub publishable_test: String,
}

#[derive(Debug, Serialize)]
pub struct Bootstrap {
    pub organization: schemas::resources::Organization,
    pub keys: BootstrapKeys,
}

/// Creates the organization and its four keys in one store write: all of them, or none.
pub async fn bootstrap(
    store: &Store,
    secret: &ServerSecret,
    name: &str,
    slug: &str,
) -> Result<Bootstrap, ApiError> {
    let org = new_organization(name.to_owned(), slug.to_owned());
    let mint_one = |key_type: KeyType, environment: Environment| {
        let spec = KeySpec {
            name: format!("{} {}", environment.as_str(), key_type.as_str()),
            key_type,
            environment,
            allowed_origins: Vec::new(),
            scopes: if key_type == KeyType::Secret {
                Scope::ALL.to_vec()
            } else {
                Vec::new()
            },
        };
        mint(secret, org.id, spec)
    };
    let (secret_live, secret_test, publishable_live, publishable_test) = (
        mint_one(KeyType::Secret, Environment::Live),
        mint_one(KeyType::Secret, Environment::Test),
        mint_one(KeyType::Publishable, Environment::Live),
        mint_one(KeyType::Publishable, Environment::Test),
    );
    let records = [
        &secret_live,
        &secret_test,
        &publishable_live,
        &publishable_test,
    ]
    .map(|(record, _)| record.clone());
    store
        .create_organization_with_keys(&org, &records)
        .await
        .map_err(|e| slug_conflict(e, &org.slug))?;
    Ok(Bootstrap {
        organization: resource(&org),
        keys: BootstrapKeys {
            secret_live: secret_live.1.expose().to_owned(),
            secret_test: secret_test.1.expose().to_owned(),
            publishable_live: publishable_live.1.expose().to_owned(),
            publishable_test: publishable_test.1.expose().to_owned(),
        },
    })
}
