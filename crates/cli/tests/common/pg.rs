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
