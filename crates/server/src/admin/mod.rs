//! The operator's view: Prometheus metrics (`/metrics`), liveness (`/healthz`), readiness
//! (`/readyz`) and the admin API (`/admin/api/…`), served with `/mcp` or on an address of their
//! own (`[admin] listen`).

mod api;
mod metered;
mod metrics;

pub use api::{shown_status, summary};
pub(crate) use metered::MeteredStore;
pub use metrics::{finished_status, Metrics};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Server;

/// How long the store gets to answer the readiness write.
const WRITE_BOUND: Duration = Duration::from_secs(2);

/// The admin routes: `/metrics`, `/readyz`, and with `healthz` also `/healthz` (which the MCP
/// router serves itself, so leave it out when merging the two).
pub fn router(server: Arc<Server>, healthz: bool) -> axum::Router {
    let mut r = api::routes()
        .route("/ui", get(ui))
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz));
    if healthz {
        r = r.route("/healthz", get(healthz_handler));
    }
    r.with_state(server)
}

/// Serves the admin routes (all three) on `listener` until the process ends.
pub async fn serve(server: Arc<Server>, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(server, true).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .await
}

async fn metrics(State(server): State<Arc<Server>>) -> impl IntoResponse {
    let active = server.engine().store().count_active().await;
    if let Err(e) = &active {
        tracing::warn!(error = %e.chain(), "metrics: cannot count unfinished tasks");
    }
    let text = server
        .metrics()
        .render(active.ok(), server.sessions().held());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// The dashboard: one page, served from the binary (no build step, nothing fetched from elsewhere);
/// it talks to the admin API and shows a login form when that asks for one.
async fn ui() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        include_str!("ui.html"),
    )
}

async fn healthz_handler() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

async fn readyz(State(server): State<Arc<Server>>) -> impl IntoResponse {
    let (ready, body) = server.readiness().await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

impl Server {
    /// Whether the server can take work, and each check's finding: the store answers a write within
    /// two seconds (on SQLite that goes through the writer thread), the sweeper ran lately, and the
    /// schema migrations are done (the store opened).
    pub async fn readiness(&self) -> (bool, Value) {
        let mut checks = Map::new();
        let mut ready = true;
        // A write that changes nothing: it takes the store's write path (and its locks) all the same.
        let started = Instant::now();
        let probe = format!("readyz-probe-{}", mcp_tasks_engine::random_id());
        let wrote = tokio::time::timeout(
            WRITE_BOUND,
            self.engine()
                .store()
                .touch_session(&probe, mcp_tasks_engine::now_ms()),
        )
        .await;
        let ms = started.elapsed().as_millis() as u64;
        let write = match wrote {
            Ok(Ok(_)) => json!({"ok": true, "ms": ms}),
            Ok(Err(e)) => {
                ready = false;
                json!({"ok": false, "ms": ms, "error": e.chain()})
            }
            Err(_) => {
                ready = false;
                json!({"ok": false, "ms": ms, "error": format!("the store did not answer a write within {} s", WRITE_BOUND.as_secs())})
            }
        };
        checks.insert("store_write".into(), write);
        let every = self.engine().config().sweep_interval;
        let bound = (every * 3).max(Duration::from_secs(10));
        let now = mcp_tasks_engine::now_ms();
        let sweeper = match self.engine().last_sweep_ms() {
            Some(t) if now.saturating_sub(t) <= bound.as_millis() as u64 => {
                json!({"ok": true, "last_sweep_ms_ago": now.saturating_sub(t)})
            }
            Some(t) => {
                ready = false;
                json!({"ok": false, "last_sweep_ms_ago": now.saturating_sub(t), "error": format!("no sweep for over {} s", bound.as_secs())})
            }
            None => {
                ready = false;
                json!({"ok": false, "error": "the engine has not started"})
            }
        };
        checks.insert("sweeper".into(), sweeper);
        // Stores apply their migrations when they open; a server exists only over an opened store.
        checks.insert("migrations".into(), json!({"ok": true}));
        (
            ready,
            json!({"status": if ready { "ready" } else { "not ready" }, "checks": checks}),
        )
    }
}
