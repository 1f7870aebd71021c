//! Prometheus metrics of one server process: tasks created and finished (counted where the change
//! happened, so replicas' counters add up), tasks unfinished (read from the store at scrape time, so
//! every replica reports the cluster's), durations, requests, rate limiting, store operations,
//! sessions and upstreams.

use mcp_tasks_engine::store::ActiveCounts;
use mcp_tasks_engine::{Outcome, ResumeCounts, TaskEvent, TaskRecord, TaskStatus};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::time::Duration;

/// Methods counted by name; any other is counted as `other` (a client cannot grow the label set).
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "subscriptions/listen",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tools/async/status",
    "tools/async/result",
    "tools/async/cancel",
    "events/list",
    "events/subscribe",
    "events/unsubscribe",
    "events/poll",
    "events/stream",
    mcp_tasks_protocol::meta::SIGNAL_METHOD,
];

/// Buckets for task durations and waits, in seconds: 10 ms to 6 hours.
const TASK_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0,
];
/// Buckets for requests and store operations, in seconds: 100 µs to 30 s.
const FAST_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

/// The metrics of one server.
pub struct Metrics {
    registry: Registry,
    created: IntCounterVec,
    finished: IntCounterVec,
    running: IntGaugeVec,
    duration: HistogramVec,
    queue_wait: Histogram,
    requests: IntCounterVec,
    request_duration: HistogramVec,
    rate_limited: IntCounter,
    store_ops: HistogramVec,
    sessions: IntGauge,
    /// Handlers running in this process now.
    runs_here: IntGauge,
    /// Tasks this process handed off while stopping.
    handed_off: IntCounter,
    /// Tasks this process resumed, by how (`retry`, `checkpoint`, `steps`).
    resumed: IntCounterVec,
    /// Tasks this process failed instead of resuming them (`max_attempts` runs).
    given_up: IntCounter,
    upstream_up: IntGaugeVec,
    /// Webhook delivery attempts, by outcome, and their time.
    webhook_attempts: IntCounterVec,
    webhook_latency: Histogram,
    event_attempts: IntCounterVec,
    event_latency: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// How a finished task counts: `completed`, `failed` (a JSON-RPC error or a tool result with
/// `isError: true`) or `cancelled`. The dashboard and the admin commands use the same three.
pub fn finished_status(t: &TaskRecord) -> &'static str {
    match (t.status, &t.outcome) {
        (TaskStatus::Cancelled, _) => "cancelled",
        (TaskStatus::Completed, Some(Outcome::Result { is_error: true, .. })) => "failed",
        (TaskStatus::Completed, _) => "completed",
        _ => "failed",
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh metrics in a registry of their own.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        // The names and labels are fixed here, so registering cannot fail but for a bug here.
        fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
            if let Err(e) = r.register(Box::new(c.clone())) {
                tracing::error!(error = %e, "a metric could not be registered");
            }
            c
        }
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let histogram_vec = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )
            .expect("valid metric")
        };
        Metrics {
            created: reg(
                &registry,
                counter_vec(
                    "mcp_tasks_created_total",
                    "Tasks created, by tool and wire form.",
                    &["tool", "wire"],
                ),
            ),
            finished: reg(
                &registry,
                counter_vec(
                    "mcp_tasks_finished_total",
                    "Tasks finished, by tool and status (completed, failed: a JSON-RPC error or an isError result, cancelled).",
                    &["tool", "status"],
                ),
            ),
            running: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "mcp_tasks_running",
                        "Unfinished tasks in the store, by status (working, input_required).",
                    ),
                    &["status"],
                )
                .expect("valid metric"),
            ),
            duration: reg(
                &registry,
                histogram_vec(
                    "mcp_tasks_duration_seconds",
                    "Time from a task's creation to its end, by tool.",
                    &["tool"],
                    TASK_BUCKETS,
                ),
            ),
            queue_wait: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "mcp_tasks_queue_wait_seconds",
                        "Time from a task's creation to the start of a run of its handler (a run after recovery waited that long).",
                    )
                    .buckets(TASK_BUCKETS.to_vec()),
                )
                .expect("valid metric"),
            ),
            requests: reg(
                &registry,
                counter_vec(
                    "mcp_requests_total",
                    "JSON-RPC requests answered, by method and outcome (ok, error, cancelled).",
                    &["method", "outcome"],
                ),
            ),
            request_duration: reg(
                &registry,
                histogram_vec(
                    "mcp_request_duration_seconds",
                    "Time to answer a JSON-RPC request, by method.",
                    &["method"],
                    FAST_BUCKETS,
                ),
            ),
            rate_limited: reg(
                &registry,
                IntCounter::new(
                    "mcp_rate_limited_total",
                    "Calls refused by a per-principal rate limit.",
                )
                .expect("valid metric"),
            ),
            store_ops: reg(
                &registry,
                histogram_vec(
                    "mcp_store_operation_seconds",
                    "Time of task store operations, by operation.",
                    &["op"],
                    FAST_BUCKETS,
                ),
            ),
            handed_off: reg(
                &registry,
                IntCounter::new(
                    "mcp_tasks_handed_off_total",
                    "Running tasks this process handed off while stopping (they resume on another replica, or here at the next start).",
                )
                .expect("valid metric"),
            ),
            resumed: reg(
                &registry,
                counter_vec(
                    "mcp_tasks_resumed_total",
                    "Interrupted or handed-off tasks this process resumed, by how: retry (started over), checkpoint (from the saved checkpoint), steps (replaying the step journal).",
                    &["kind"],
                ),
            ),
            given_up: reg(
                &registry,
                IntCounter::new(
                    "mcp_tasks_given_up_total",
                    "Interrupted or handed-off tasks this process failed instead of resuming: they had had [tasks] max_attempts runs.",
                )
                .expect("valid metric"),
            ),
            sessions: reg(
                &registry,
                IntGauge::new(
                    "mcp_sessions_active",
                    "2025-11-25 sessions held by this process.",
                )
                .expect("valid metric"),
            ),
            runs_here: reg(
                &registry,
                IntGauge::new(
                    "mcp_tasks_runs_here",
                    "Task handlers running in this process now: the slots in use. A task suspended for a durable sleep holds none.",
                )
                .expect("valid metric"),
            ),
            upstream_up: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "mcp_upstream_up",
                        "Whether a gateway upstream is connected (1) or not (0).",
                    ),
                    &["upstream"],
                )
                .expect("valid metric"),
            ),
            webhook_attempts: reg(
                &registry,
                counter_vec(
                    "mcp_tasks_webhook_attempts_total",
                    "Webhook delivery attempts this process made, by outcome: delivered (2xx), retry (to be tried again), gone (410: the task's later events to that endpoint are dropped), failed (given up: too old, or the endpoint is no longer allowed).",
                    &["outcome"],
                ),
            ),
            webhook_latency: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "mcp_tasks_webhook_attempt_seconds",
                        "Time of a webhook delivery attempt, from the request to the receiver's answer (or the error).",
                    )
                    .buckets(FAST_BUCKETS.to_vec()),
                )
                .expect("valid metric"),
            ),
            event_attempts: reg(
                &registry,
                counter_vec(
                    "mcp_tasks_event_delivery_attempts_total",
                    "MCP Events delivery attempts this process made, by outcome: delivered (2xx), retry (to be tried again), gone (410: this delivery is dropped, the subscription kept), failed (given up: 5 attempts, 413, the subscription ended).",
                    &["outcome"],
                ),
            ),
            event_latency: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "mcp_tasks_event_delivery_seconds",
                        "Time of an MCP Events delivery attempt, from the request to the receiver's answer (or the error).",
                    )
                    .buckets(FAST_BUCKETS.to_vec()),
                )
                .expect("valid metric"),
            ),
            registry,
        }
    }

    /// Counts a webhook delivery attempt.
    pub fn webhook_attempt(&self, outcome: &str, took: std::time::Duration) {
        self.webhook_attempts.with_label_values(&[outcome]).inc();
        self.webhook_latency.observe(took.as_secs_f64());
    }

    /// Counts an MCP Events delivery attempt.
    pub fn event_attempt(&self, outcome: &str, took: std::time::Duration) {
        self.event_attempts.with_label_values(&[outcome]).inc();
        self.event_latency.observe(took.as_secs_f64());
    }

    /// Counts a task event published in this process.
    pub(crate) fn observe(&self, e: &TaskEvent) {
        match e {
            TaskEvent::Created(t) => {
                self.created.with_label_values(&[&t.tool, &t.era]).inc();
                // Created finished (invalid arguments): no change event follows.
                if t.status.is_terminal() {
                    self.finished_task(t);
                }
            }
            TaskEvent::Changed(t) if t.status.is_terminal() => self.finished_task(t),
            _ => {}
        }
    }

    fn finished_task(&self, t: &TaskRecord) {
        self.finished
            .with_label_values(&[&t.tool, finished_status(t)])
            .inc();
        let end = t.finished_at.unwrap_or(t.updated_at);
        let secs = end.saturating_sub(t.created_at) as f64 / 1000.0;
        self.duration.with_label_values(&[&t.tool]).observe(secs);
    }

    /// A handler started (see `EngineBuilder::on_run_start`).
    pub(crate) fn run_started(&self, t: &TaskRecord, now_ms: u64) {
        let waited = now_ms.saturating_sub(t.created_at) as f64 / 1000.0;
        self.queue_wait.observe(waited);
    }

    /// A request was answered (`outcome`: ok, error or cancelled).
    pub(crate) fn request(&self, method: &str, outcome: &str, took: Duration) {
        let method = if KNOWN_METHODS.contains(&method) {
            method
        } else {
            "other"
        };
        self.requests.with_label_values(&[method, outcome]).inc();
        self.request_duration
            .with_label_values(&[method])
            .observe(took.as_secs_f64());
    }

    /// A call was refused by a rate limit.
    pub(crate) fn rate_limited(&self) {
        self.rate_limited.inc();
    }

    /// A store operation took `took`.
    pub(crate) fn store_op(&self, op: &'static str, took: Duration) {
        self.store_ops
            .with_label_values(&[op])
            .observe(took.as_secs_f64());
    }

    /// Whether gateway upstream `name` is connected.
    pub fn upstream_up(&self, name: &str, up: bool) {
        self.upstream_up
            .with_label_values(&[name])
            .set(i64::from(up));
    }

    /// The text exposition, with the gauges read now: unfinished tasks (`None` when the store did
    /// not answer: the gauge keeps its last value), sessions and the handlers running here.
    pub(crate) fn render(
        &self,
        active: Option<ActiveCounts>,
        sessions: usize,
        runs_here: usize,
        resumes: ResumeCounts,
    ) -> String {
        // The engine counts; the counters catch up with it (they only ever go up).
        let catch_up = |c: &IntCounter, to: u64| {
            let now = c.get();
            if to > now {
                c.inc_by(to - now);
            }
        };
        catch_up(&self.handed_off, resumes.handed_off);
        catch_up(&self.given_up, resumes.given_up);
        for (kind, n) in [
            ("retry", resumes.resumed_retry),
            ("checkpoint", resumes.resumed_checkpoint),
            ("steps", resumes.resumed_steps),
        ] {
            catch_up(&self.resumed.with_label_values(&[kind]), n);
        }
        if let Some(a) = active {
            self.running
                .with_label_values(&["working"])
                .set(i64::try_from(a.working).unwrap_or(i64::MAX));
            self.running
                .with_label_values(&["input_required"])
                .set(i64::try_from(a.input_required).unwrap_or(i64::MAX));
        }
        self.sessions
            .set(i64::try_from(sessions).unwrap_or(i64::MAX));
        self.runs_here
            .set(i64::try_from(runs_here).unwrap_or(i64::MAX));
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "metrics could not be encoded");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
