//! The operator commands: `vigil bootstrap`, `vigil migrate`, `vigil keys set-rate-limit` and
//! `vigil keys create`. They open the store as `vigil serve` does (`server::open_store`).

use anyhow::{Context, bail};
use schemas::credential::Credential;
use schemas::{ErrorCode, KeyId};

use crate::config::{BootstrapArgs, CreateKeyArgs, MigrateArgs, SetRateLimitArgs};
use crate::server::open_store;

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

/// Brings a PostgreSQL store's schema to this build's version (`store/sql/`).
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
