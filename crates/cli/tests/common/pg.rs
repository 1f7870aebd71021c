//! A fresh PostgreSQL schema per test, on the test database (`MCP_TASKS_TEST_PG`, else the machine's
//! server at 127.0.0.1:5432, database `test`).

/// The test database URL.
pub fn test_url() -> String {
    std::env::var("MCP_TASKS_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of its own for one test, and a store URL whose connections use it.
pub struct FreshSchema {
    pub name: String,
    pub url: String,
}

impl FreshSchema {
    /// Creates schema `t_<tag>_<random>`.
    pub async fn new(tag: &str) -> FreshSchema {
        let name = format!("t_{tag}_{}", &mcp_tasks_engine::random_id()[..12]);
        let client = connect().await;
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a test schema");
        let base = test_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
        FreshSchema { name, url }
    }

    /// Drops the schema and everything in it.
    pub async fn drop_schema(&self) {
        let client = connect().await;
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
            .await;
    }
}

async fn connect() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&test_url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL (MCP_TASKS_TEST_PG)");
    tokio::spawn(conn);
    client
}

/// After `after`, terminates every PostgreSQL connection whose `application_name` is one of `apps`
/// every 30 ms for `lasting`; how many it terminated.
pub async fn terminate_connections(
    apps: Vec<String>,
    after: std::time::Duration,
    lasting: std::time::Duration,
) -> i64 {
    tokio::time::sleep(after).await;
    let client = connect().await;
    let until = std::time::Instant::now() + lasting;
    let mut terminated = 0;
    while std::time::Instant::now() < until {
        let row = client
            .query_one(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = ANY($1)",
                &[&apps],
            )
            .await
            .expect("terminate connections");
        terminated += row.get::<_, i64>(0);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    terminated
}
