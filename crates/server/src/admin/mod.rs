//! The operator's view: Prometheus metrics (`/metrics`), liveness (`/healthz`), readiness
//! (`/readyz`), the dashboard (`/ui`) and the admin API (`/admin/api/…`), served with `/mcp` or on
//! an address of their own (`[admin] listen`).
//!
//! Health probes are public (orchestrators call them without credentials). Everything else is
//! the operator's (see `access`): the admin API and the dashboard always, the metrics unless
//! `[admin] metrics_public` (by default public only when no authentication is configured).

mod access;
mod api;
mod journal;
mod metered;
mod metrics;
mod signals;
mod subscriptions;
mod webhooks;

pub use api::{shown_status, summary};
pub(crate) use metered::MeteredStore;
pub use metrics::{finished_status, Metrics};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Server;

/// How long the store gets to answer the readiness write.
const WRITE_BOUND: Duration = Duration::from_secs(2);

/// The admin routes: `/metrics`, `/ui`, `/admin/…` (behind `access::guard`), `/readyz`, and with
/// `healthz` also `/healthz` (which the MCP router serves itself, so leave it out when merging the
/// two).
pub fn router(server: Arc<Server>, healthz: bool) -> axum::Router {
    let operators = api::routes()
        .route("/ui", get(ui))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            server.clone(),
            access::guard,
        ));
    let mut r = operators.route("/readyz", get(readyz));
    if healthz {
        r = r.route("/healthz", get(healthz_handler));
    }
    r.with_state(server)
}

/// Serves the admin routes (all of them) on `listener` until `shutdown` resolves, under the same
/// connection limits as `/mcp` (a cap, header and idle timeouts).
pub async fn serve(
    server: Arc<Server>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(server.clone(), true);
    crate::http::serve_router(server, listener, app, shutdown).await
}

/// Whether `/metrics` answers without an operator's credentials: `[admin] metrics_public`, by
/// default only when no authentication is configured.
fn metrics_public(server: &Server) -> bool {
    server
        .config()
        .metrics_public
        .unwrap_or_else(|| !server.authenticator().configured())
}

async fn metrics(State(server): State<Arc<Server>>, parts: axum::http::request::Parts) -> Response {
    if !metrics_public(&server) {
        if let Err(why) = access::operator_of(&server, &parts).await {
            return access::refusal(why);
        }
    }
    let active = server.engine().store().count_active().await;
    if let Err(e) = &active {
        tracing::warn!(error = %e.chain(), "metrics: cannot count unfinished tasks");
    }
    let text = server.metrics().render(
        active.ok(),
        server.sessions().held(),
        server.engine().running_count(),
        server.engine().resume_counts(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The dashboard: one page, served from the binary (no build step, nothing fetched from elsewhere).
/// It holds no data: that comes from the admin API. To someone who is not (yet) an operator it is
/// served with the refusal's status (401 or 403), and shows its login form.
async fn ui(State(server): State<Arc<Server>>, parts: axum::http::request::Parts) -> Response {
    let status = match access::operator_of(&server, &parts).await {
        Ok(_) => StatusCode::OK,
        Err(why) => access::refusal(why).status(),
    };
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            // Nothing from elsewhere, and never inside another site's frame.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        include_str!("ui.html"),
    )
        .into_response()
}

async fn healthz_handler() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

/// Readiness, public (orchestrators probe it without credentials): the status and each check's
/// finding; why a check failed (an error naming files, hosts) only to an operator.
async fn readyz(State(server): State<Arc<Server>>, parts: axum::http::request::Parts) -> Response {
    let (ready, mut body) = server.readiness().await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let operator = access::operator_of(&server, &parts).await.is_ok();
    if !operator {
        if let Some(checks) = body.get_mut("checks").and_then(Value::as_object_mut) {
            for check in checks.values_mut() {
                if let Some(c) = check.as_object_mut() {
                    if c.remove("error").is_some() {
                        c.insert("error".into(), json!("(shown to operators)"));
                    }
                }
            }
        }
    }
    (status, axum::Json(body)).into_response()
}

impl Server {
    /// Whether the server can take work, and each check's finding: the store answers a write within
    /// two seconds (on SQLite that goes through the writer thread), the sweeper ran lately, and the
    /// schema migrations are done (the store opened).
    pub async fn readiness(&self) -> (bool, Value) {
        let mut checks = Map::new();
        let mut ready = true;
        // Stopping: not ready from the first moment, so a balancer stops sending at once.
        if self.draining() {
            ready = false;
            checks.insert(
                "draining".into(),
                json!({"ok": false, "error": "the server is stopping: running tasks are finishing"}),
            );
        }
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
