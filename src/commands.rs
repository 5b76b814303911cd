//! The operator commands: `vigil bootstrap`, `vigil migrate`, `vigil keys set-rate-limit`, and
//! the development organization that `vigil serve` writes on first start.

use std::path::Path;

use anyhow::{Context, bail};
use schemas::credential::Credential;
use schemas::{ErrorCode, KeyId};
use secrets::{ServerSecret, write_private};
use store::Store;

use crate::config::{BootstrapArgs, CreateKeyArgs, MigrateArgs, SetRateLimitArgs};
use crate::server::open_store;

/// The settings row that records the development organization, once it is fully written.
const DEVELOPMENT_ORGANIZATION: &str = "development_organization";

pub async fn bootstrap(args: BootstrapArgs) -> anyhow::Result<()> {
    schemas::validate::slug(&args.slug).map_err(|issue| anyhow::anyhow!("--slug {issue}"))?;
    schemas::validate::name(&args.name).map_err(|issue| anyhow::anyhow!("--name {issue}"))?;
    let (store, secret) = open_store(&args.store).await?;
    match admin_api::bootstrap::bootstrap(&store, &secret, &args.name, &args.slug).await {
        Ok(out) => {
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Err(e) if e.code == ErrorCode::Conflict => bail!(
            "an organization with the slug `{}` already exists",
            args.slug
        ),
        Err(e) => bail!("bootstrap failed: {}", e.message),
    }
}

/// Brings a PostgreSQL store's schema to this build's version (`schemas/sql/`).
pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let (applied, latest) = if store::is_postgres(&args.store) {
        let applied = store::postgres::migrations::migrate(&args.store)
            .await
            .context("migrating the PostgreSQL store")?;
        (applied, store::postgres::migrations::latest())
    } else if args.store.starts_with("scylla://") {
        let applied = store::scylla::migrations::migrate(&args.store)
            .await
            .context("migrating the ScyllaDB keyspace")?;
        (applied, store::scylla::migrations::latest())
    } else {
        bail!(
            "`vigil migrate` is for the PostgreSQL (postgres://...) and ScyllaDB (scylla://...) \
             stores; the embedded store creates its tables itself"
        );
    };
    if applied.is_empty() {
        println!("the schema is current (version {latest})");
    } else {
        println!("applied {applied:?}; the schema is at version {latest}");
    }
    Ok(())
}

/// On first start with an empty embedded store: an organization with four keys, written to
/// `credentials.json` (mode 0600). Only the path is logged, never the keys.
pub async fn ensure_development_organization(
    store: &Store,
    secret: &ServerSecret,
    path: &Path,
) -> anyhow::Result<()> {
    if store.get_setting(DEVELOPMENT_ORGANIZATION).await?.is_some() {
        return Ok(());
    }
    let mut slug = "development".to_owned();
    let out = loop {
        match admin_api::bootstrap::bootstrap(store, secret, "Development", &slug).await {
            Ok(out) => break out,
            // A start that crashed half-way left the slug taken but no credentials file.
            Err(e) if e.code == ErrorCode::Conflict => {
                slug = format!(
                    "development-{}",
                    ulid::Ulid::generate().to_string().to_lowercase()
                )
            }
            Err(e) => bail!("creating the development organization: {}", e.message),
        }
    };
    write_private(path, serde_json::to_string_pretty(&out)?.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    store
        .put_setting_if_absent(
            DEVELOPMENT_ORGANIZATION,
            out.organization.id.to_string().as_bytes(),
        )
        .await?;
    tracing::info!(path = %path.display(), organization = %out.organization.id, "created the development organization; its keys are in this file");
    Ok(())
}

pub async fn set_rate_limit(args: SetRateLimitArgs) -> anyhow::Result<()> {
    if args.limit == 0 {
        bail!("--limit must be at least 1");
    }
    let (store, secret) = open_store(&args.store).await?;
    let key = match (&args.key_id, &args.key) {
        (Some(id), _) => {
            let id: KeyId = id.parse().map_err(|e| anyhow::anyhow!("--key-id {e}"))?;
            let (org, env) = store
                .locate_api_key(id)
                .await?
                .context("no key has this id")?;
            store
                .get_api_key(org, env, id)
                .await?
                .context("no key has this id")?
        }
        (None, Some(token)) => {
            let credential = Credential::parse(token).context("--key is not a Vigil key")?;
            store
                .find_api_key_by_hash(&secret.hash_credential(&credential))
                .await?
                .context("no key matches this credential")?
        }
        (None, None) => bail!("give --key-id or --key"),
    };
    let mut key = key;
    key.rate_limit_override = Some(args.limit);
    store.update_api_key(&key).await?;
    println!("{} now allows {} requests per minute", key.id, args.limit);
    Ok(())
}

pub async fn create_key(args: CreateKeyArgs) -> anyhow::Result<()> {
    use schemas::credential::{Environment, KeyType};
    let organization: schemas::OrgId = args
        .organization
        .parse()
        .map_err(|e| anyhow::anyhow!("--organization {e}"))?;
    let key_type =
        KeyType::parse(&args.key_type).context("--type must be secret or publishable")?;
    let environment =
        Environment::parse(&args.environment).context("--environment must be live or test")?;
    schemas::validate::name(&args.name).map_err(|issue| anyhow::anyhow!("--name {issue}"))?;
    let (store, secret) = open_store(&args.store).await?;
    store
        .get_organization(organization)
        .await?
        .context("no organization has this id")?;
    let spec = admin_api::api_keys::KeySpec {
        name: args.name,
        key_type,
        environment,
        allowed_origins: Vec::new(),
        scopes: if key_type == KeyType::Secret {
            schemas::Scope::ALL.to_vec()
        } else {
            Vec::new()
        },
    };
    let (record, credential) = admin_api::api_keys::issue_key(&store, &secret, organization, spec)
        .await
        .map_err(|e| anyhow::anyhow!("issuing the key: {}", e.message))?;
    let key = admin_api::api_keys::resource(&record, Some(&credential));
    println!("{}", serde_json::to_string_pretty(&key)?);
    Ok(())
}
