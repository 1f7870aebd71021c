//! Opening a store: the URL (with its pool size), the connection's name, the pool, the schema.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::time::Duration;
use tokio_postgres::NoTls;

use super::{creates, schema, writes, PostgresStore};
use crate::store::{Context, StoreError};

/// Connections a store keeps at most, unless the URL says otherwise (`pool_max_conns`).
pub(super) const POOL_SIZE: usize = 16;
/// The URL parameter that sets the pool size (pgx's name for it); not passed on to PostgreSQL.
const POOL_PARAM: &str = "pool_max_conns";
/// How long a request waits for a connection (or for one to be made) before it fails.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// A connection URL without its password, for messages.
pub(super) fn redact(url: &str) -> String {
    // postgres://USER:PASSWORD@HOST…: the password sits between the user's ':' and the '@'.
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.find('@') else {
        return url.to_string();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

/// Parses a store URL: the connection settings tokio-postgres reads, and the pool size from
/// `pool_max_conns=N` (in the URL's query, or as a `key=value` word of a key-value string), which
/// PostgreSQL itself would refuse as an unknown option.
pub(super) fn parse_url(url: &str) -> Result<(tokio_postgres::Config, usize), StoreError> {
    let mut pool_size = None;
    let mut take = |value: &str| -> Result<(), StoreError> {
        let n: usize = value.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            StoreError::message(format!(
                "{POOL_PARAM}={value} in the PostgreSQL URL: expected a positive whole number"
            ))
        })?;
        pool_size = Some(n);
        Ok(())
    };
    let cleaned = if url.contains("://") {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    match pair.split_once('=') {
                        Some((POOL_PARAM, value)) => take(value)?,
                        _ => kept.push(pair),
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for word in url.split_whitespace() {
            match word.split_once('=') {
                Some((POOL_PARAM, value)) => take(value)?,
                _ => kept.push(word),
            }
        }
        kept.join(" ")
    };
    let config = cleaned
        .parse()
        .with_context(|| format!("parse the PostgreSQL URL {}", redact(url)))?;
    Ok((config, pool_size.unwrap_or(POOL_SIZE)))
}

/// Names the connections `mcp-tasks` for the operator's `pg_stat_activity`, unless the URL names
/// them (`?application_name=…`).
pub(super) fn named(config: &mut tokio_postgres::Config) {
    if config.get_application_name().is_none() {
        config.application_name("mcp-tasks");
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`, or any form tokio-postgres accepts) and
    /// brings the schema up to date (several replicas may do this at once).
    ///
    /// The pool keeps at most 16 connections; `pool_max_conns=N` in the URL's query changes that.
    pub async fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let (config, pool_size) = parse_url(url)?;
        Self::with_config(config, pool_size).await
    }

    /// Like [`PostgresStore::open`], with the store's tables in `schema` (created if missing): for
    /// tests, and for several stores in one database.
    pub async fn open_in_schema(url: &str, schema_name: &str) -> Result<PostgresStore, StoreError> {
        if schema_name.is_empty()
            || !schema_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(StoreError::message(format!(
                "schema name {schema_name:?}: use letters, digits and underscores"
            )));
        }
        let (mut config, pool_size) = parse_url(url)?;
        let (client, connection) = config
            .connect(NoTls)
            .await
            .with_context(|| format!("connect to {}", redact(url)))?;
        tokio::spawn(connection);
        schema::create_schema(&client, schema_name).await?;
        config.options(format!("-c search_path={schema_name}"));
        Self::with_config(config, pool_size).await
    }

    async fn with_config(
        mut config: tokio_postgres::Config,
        pool_size: usize,
    ) -> Result<PostgresStore, StoreError> {
        named(&mut config);
        let (mut client, connection) = config
            .connect(NoTls)
            .await
            .context("connect to PostgreSQL")?;
        let conn_task = tokio::spawn(connection);
        schema::migrate(&mut client).await?;
        let migrated: Option<i64> = client
            .query_one(
                "SELECT MIN(applied_at) FROM mcp_tasks_migrations WHERE version = $1",
                &[&schema::SECRET_ONCE],
            )
            .await
            .context("read when webhook secrets began to be kept once")?
            .get(0);
        if let Some(at) = migrated {
            let until = u64::try_from(at)
                .unwrap_or(0)
                .saturating_add(super::rows::SECRET_COPY_WINDOW_MS);
            super::rows::SECRET_COPIES.fetch_max(until, std::sync::atomic::Ordering::Relaxed);
        }
        drop(client);
        let _ = conn_task.await;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .wait_timeout(Some(CONNECT_WAIT))
            .create_timeout(Some(CONNECT_WAIT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .context("build the PostgreSQL connection pool")?;
        let creates = creates::spawn(pool.clone());
        let writes = writes::spawn(pool.clone());
        Ok(PostgresStore {
            pool,
            config,
            creates,
            writes,
            recent: dashmap::DashMap::new(),
            finished: dashmap::DashMap::new(),
        })
    }
}
