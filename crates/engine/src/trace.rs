//! The spans a running task's work is traced under, and the targets a subscriber tells them apart
//! by.
//!
//! A task can run for hours, and a hundred thousand can run at once, so a span held for the whole
//! run is not free: a log writer's registry keeps several hundred bytes per open span (its fields
//! formatted, its extensions), about 60 MiB for 100,000 tasks. So a run has two spans, both named
//! `task` and carrying `task`, `tool` and `principal`:
//!
//! - one held for the whole run, under [`RUN_SPAN_TARGET`], for exporters that want the task's
//!   duration (OpenTelemetry);
//! - one made afresh each time the run is polled, under [`POLL_SPAN_TARGET`], for log writers: every
//!   line the run writes carries the task, and nothing is kept while it waits.
//!
//! A subscriber enables each where it wants it (`mcp-tasks serve` keeps the held span away from its
//! log lines and the per-poll spans away from its exporter); a span no layer enables costs nothing
//! but a check.

use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Target of the span held for a task's whole run.
pub const RUN_SPAN_TARGET: &str = "mcp_tasks::trace";

/// Target of the span entered each time a task's run is polled.
pub const POLL_SPAN_TARGET: &str = "mcp_tasks::task";

/// What a run's spans say about it.
pub(crate) trait RunLabels {
    /// The task id.
    fn task(&self) -> &str;
    /// The tool (handler) name.
    fn tool(&self) -> &str;
    /// The principal that owns the task.
    fn principal(&self) -> &str;
}

pin_project! {
    /// A run's future, polled inside its spans.
    pub(crate) struct Traced<F, L> {
        #[pin]
        fut: F,
        labels: Arc<L>,
        run: tracing::Span,
    }
}

impl<F, L: RunLabels> Traced<F, L> {
    /// Wraps `fut`, the run of the task `labels` describe, and opens its held span: a root, only
    /// linked to the span current now (the request that started the task), since as its child it
    /// would keep that span alive for as long as the task runs.
    pub(crate) fn new(fut: F, labels: Arc<L>) -> Self {
        let run = tracing::info_span!(target: RUN_SPAN_TARGET, parent: None, "task", task = %labels.task(), tool = %labels.tool(), principal = %labels.principal());
        run.follows_from(tracing::Span::current());
        Self { fut, labels, run }
    }
}

impl<F: Future, L: RunLabels> Future for Traced<F, L> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _run = this.run.enter();
        let labels = &**this.labels;
        let poll = tracing::info_span!(target: POLL_SPAN_TARGET, "task", task = %labels.task(), tool = %labels.tool(), principal = %labels.principal());
        let _poll = poll.enter();
        this.fut.poll(cx)
    }
}
