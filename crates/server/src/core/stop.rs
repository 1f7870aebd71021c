//! [`Server::stop`]: the whole stop of a server, in the order a deploy needs, so that an embedder
//! calls one method instead of copying the sequence (and its order) from the binary.
//!
//! 1. **Drain** ([`Server::begin_drain`]): no new tool call; running tasks get
//!    [`StopPlan::drain`] to finish while their clients follow them. If they all finish, the
//!    server lingers a moment ([`StopPlan::linger`]) so that clients read what just finished.
//! 2. **Hand-off** ([`Engine::hand_off`](mcp_tasks_engine::Engine::hand_off)) of what still
//!    runs: each handler is told so and gets its grace; its lease is let go for another replica,
//!    or for this one's next start.
//! 3. **Close** ([`Server::close`]), when it serves HTTP: the listener closes and requests on open
//!    connections are answered 503 until none comes for [`StopPlan::close_quiet`] (at most
//!    [`StopPlan::close_bound`]).
//! 4. **Stop serving**: every HTTP serve loop ([`crate::http::serve_router`]) ends, and is waited
//!    for; then open streams and long waits end, and the engine is shut down
//!    ([`Server::shutdown`]).
//! 5. **Webhooks**: the deliveries in flight get [`StopPlan::webhooks`]; the claimed rest are let
//!    go for another replica.
//! 6. **Engine**: its background services waited for.
//!
//! An interruption (a second signal) skips what is left of steps 1 to 3 and all of 5 and 6: the
//! stop returns once the serve loops have ended, and the runs' leases and the webhook claims run
//! out by themselves, as after a crash. Without one, step 6 is bounded by the longest grace a run
//! gets (`cancel_grace`, `hand_off_grace`) and a second.
//!
//! A serve loop is counted from its first poll: a stop that begins before a just-spawned
//! `serve_router` has run skips the close, and that loop ends as soon as it starts.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::Server;

/// Past the longest grace a run gets, a stop waits this much more for the engine's services.
const SERVICES_SLACK: Duration = Duration::from_secs(1);

/// How a stop goes; the defaults are the binary's, and a whole stop with them fits in
/// Kubernetes' default grace period of 30 s: the drain (12 s), the hand-off (the engine's
/// `hand_off_grace`, 8 s, and 1 s for the runs to let go), the close (at most 2 s) and the
/// webhooks (at most 3 s): 26 s at most, when the handlers honour their stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopPlan {
    /// How long running tasks get to finish before they are handed off.
    pub drain: Duration,
    /// How long a drained server still answers once its last task has finished.
    pub linger: Duration,
    /// The close ends once no request has come for this long…
    pub close_quiet: Duration,
    /// …or after this long, when requests keep coming.
    pub close_bound: Duration,
    /// How long the webhook deliveries in flight get.
    pub webhooks: Duration,
}

impl Default for StopPlan {
    fn default() -> StopPlan {
        StopPlan {
            drain: Duration::from_secs(12),
            linger: Duration::from_secs(1),
            close_quiet: Duration::from_millis(300),
            close_bound: Duration::from_secs(2),
            webhooks: Duration::from_secs(3),
        }
    }
}

/// How a stop went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Tasks that were running when the drain began.
    pub running_at_drain: usize,
    /// Tasks handed off once the drain time was over (0 when all finished in it).
    pub handed_off: usize,
    /// The stop was interrupted: what was left of the drain, hand-off and close was skipped.
    pub interrupted: bool,
}

/// The HTTP serve loops of a server, counted so that a stop can end them and wait for them.
#[derive(Debug, Default)]
pub(crate) struct ServeLoops {
    open: AtomicUsize,
    ended: tokio::sync::Notify,
    /// Raised by a stop once it has closed: every serve loop ends.
    end: tokio_util::sync::CancellationToken,
}

/// One serve loop, counted until dropped.
pub(crate) struct ServeLoop<'a>(&'a ServeLoops);

impl Drop for ServeLoop<'_> {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

impl ServeLoops {
    /// Counts a serve loop until the returned value is dropped.
    pub(crate) fn enter(&self) -> ServeLoop<'_> {
        self.open.fetch_add(1, Ordering::SeqCst);
        ServeLoop(self)
    }

    /// Resolves when a stop ends the serve loops.
    pub(crate) async fn ending(&self) {
        self.end.cancelled().await
    }

    fn any(&self) -> bool {
        self.open.load(Ordering::SeqCst) > 0
    }

    /// Ends every serve loop and waits for them.
    async fn end_all(&self) {
        self.end.cancel();
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.any() {
                return;
            }
            ended.await;
        }
    }
}

impl Server {
    /// Stops the server as a deploy needs (see the module note for the steps and their order):
    /// drain, hand-off, close, the serve loops' end, webhooks, engine. `interrupt` resolving (a
    /// second signal) skips what is left of the drain, hand-off and close. Returns once the
    /// engine's services have ended; the process may exit then.
    ///
    /// ```no_run
    /// # async fn run(server: std::sync::Arc<mcp_tasks_server::Server>, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    /// use mcp_tasks_server::{http, StopPlan};
    /// server.start().await.expect("recovery");
    /// let app = http::router(server.clone());
    /// let serving = tokio::spawn(http::serve_router(
    ///     server.clone(),
    ///     listener,
    ///     app,
    ///     std::future::pending(),
    /// ));
    /// tokio::signal::ctrl_c().await?;
    /// // A second Ctrl-C stops at once.
    /// let report = server
    ///     .stop(&StopPlan::default(), async {
    ///         let _ = tokio::signal::ctrl_c().await;
    ///     })
    ///     .await;
    /// println!("handed off {} tasks", report.handed_off);
    /// serving.await.expect("the serve loop")?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn stop(&self, plan: &StopPlan, interrupt: impl Future<Output = ()>) -> StopReport {
        let interrupt = futures::FutureExt::fuse(interrupt);
        tokio::pin!(interrupt);
        let mut report = self.drain_and_hand_off(plan, &mut interrupt).await;
        if !report.interrupted && self.serve_loops.any() {
            tokio::select! {
                () = self.close(plan.close_quiet, plan.close_bound) => {}
                () = &mut interrupt => {
                    tracing::info!("interrupted: stopping now");
                    report.interrupted = true;
                }
            }
        }
        // The serve loops end, then open streams and long waits (`Server::shutdown`, which also
        // shuts the engine down and tells the webhook sender to stop).
        self.serve_loops.end_all().await;
        self.shutdown();
        if report.interrupted {
            // At once: no wait for deliveries or for runs in their grace (their leases and
            // claims run out by themselves, as after a crash).
            return report;
        }
        // Deliveries this node claimed and did not send are let go for another replica.
        self.webhooks_stopped(plan.webhooks).await;
        // The lease renewal and the fence last as long as a run in its grace: bounded by the
        // longest grace, so a handler that never returns cannot hold the stop.
        let config = self.engine().config();
        let bound = config.cancel_grace.max(config.hand_off_grace) + SERVICES_SLACK;
        if tokio::time::timeout(bound, self.engine().stopped())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.engine().running_count(),
                "runs did not end within their grace; stopping without them"
            );
        }
        report
    }

    /// The drain, then the hand-off of what still runs (steps 1 and 2 of [`Server::stop`]).
    async fn drain_and_hand_off(
        &self,
        plan: &StopPlan,
        interrupt: &mut std::pin::Pin<&mut futures::future::Fuse<impl Future<Output = ()>>>,
    ) -> StopReport {
        let engine = self.engine().clone();
        self.begin_drain();
        let mut report = StopReport {
            running_at_drain: engine.running_count(),
            ..StopReport::default()
        };
        tracing::info!(
            running = report.running_at_drain,
            drain_secs = plan.drain.as_secs(),
            "stopping: no new calls are taken; running tasks get the drain time to finish"
        );
        let deadline = tokio::time::Instant::now() + plan.drain;
        tokio::select! {
            _ = tokio::time::timeout_at(deadline, engine.idle()) => {}
            () = interrupt.as_mut() => {
                tracing::info!("interrupted: stopping now");
                report.interrupted = true;
                return report;
            }
        }
        match engine.running_count() {
            0 => {
                tracing::info!("every running task has finished; shutting down");
                // A moment for clients to read what just finished (a poll, a blocked result).
                let linger = deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .min(plan.linger);
                tokio::select! {
                    () = tokio::time::sleep(linger) => {}
                    () = interrupt.as_mut() => {
                        tracing::info!("interrupted: stopping now");
                        report.interrupted = true;
                    }
                }
            }
            left => {
                tracing::info!(
                    left,
                    "the drain time is over; handing off the tasks still running (they resume on another replica, or here at the next start)"
                );
                tokio::select! {
                    n = engine.hand_off() => {
                        tracing::info!(handed_off = n, "handed off");
                        report.handed_off = n;
                    }
                    () = interrupt.as_mut() => {
                        tracing::info!("interrupted: stopping now");
                        report.interrupted = true;
                    }
                }
            }
        }
        report
    }
}
