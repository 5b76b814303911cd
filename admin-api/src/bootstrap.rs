//! An organization with its four keys (live and test, secret and publishable), as
//! `vigil bootstrap` prints it and as the development organization is written to
//! `<data-dir>/credentials.json` on first start.

use edge::ApiError;
use edge::secrets::ServerSecret;
use schemas::Scope;
use schemas::credential::{Environment, KeyType};
use serde::Serialize;
use store::Store;

use crate::api_keys::{KeySpec, issue_key};
use crate::organizations::{create_organization, resource};

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

pub async fn bootstrap(
    store: &Store,
    secret: &ServerSecret,
    name: &str,
    slug: &str,
) -> Result<Bootstrap, ApiError> {
    let org = create_organization(store, name.to_owned(), slug.to_owned()).await?;
    let issue = |key_type: KeyType, environment: Environment| {
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
        issue_key(store, secret, org.id, spec)
    };
    let secret_live = issue(KeyType::Secret, Environment::Live).await?.1;
    let secret_test = issue(KeyType::Secret, Environment::Test).await?.1;
    let publishable_live = issue(KeyType::Publishable, Environment::Live).await?.1;
    let publishable_test = issue(KeyType::Publishable, Environment::Test).await?.1;
    Ok(Bootstrap {
        organization: resource(&org),
        keys: BootstrapKeys {
            secret_live: secret_live.expose().to_owned(),
            secret_test: secret_test.expose().to_owned(),
            publishable_live: publishable_live.expose().to_owned(),
            publishable_test: publishable_test.expose().to_owned(),
        },
    })
}
