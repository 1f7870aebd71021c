//! The node's background services: named loops with handles, so that a stop can wait for each to
//! end and an operator (or a test) can see which run.
//!
//! [`Engine::start`] starts them: lease renewal, the sweeper, and on a store several nodes share
//! the take-over and the fence; the stopper is started by the first run or by `start`, whichever
//! comes first. Each ends once [`Engine::shutdown`] is called (the lease renewal and the fence only
//! once no run is left: runs in their grace keep their leases and their fence) or the engine is
//! dropped. [`Engine::stopped`] waits for all of them.

use std::future::Future;
use std::sync::Mutex;
use tokio::task::JoinHandle;

use super::Engine;

/// One background service, as [`Engine::services`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceState {
    /// What it does: `stopper`, `lease renewal`, `take-over`, `fence` or `sweeper`.
    pub name: &'static str,
    /// Whether its loop still runs.
    pub running: bool,
}

/// The services started on this engine, by name, with their handles.
#[derive(Default)]
pub(super) struct Services(Mutex<Vec<(&'static str, JoinHandle<()>)>>);

impl Services {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, JoinHandle<()>)>> {
        // Each change is one push or one take: a poisoned lock holds a whole list.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `service` as `name` on the current runtime.
    pub(super) fn spawn(
        &self,
        name: &'static str,
        service: impl Future<Output = ()> + Send + 'static,
    ) {
        let handle = tokio::spawn(service);
        self.lock().push((name, handle));
    }

    fn states(&self) -> Vec<ServiceState> {
        self.lock()
            .iter()
            .map(|(name, handle)| ServiceState {
                name,
                running: !handle.is_finished(),
            })
            .collect()
    }

    /// Waits for every service started so far to end.
    async fn ended(&self) {
        let handles: Vec<_> = std::mem::take(&mut *self.lock());
        for (name, handle) in handles {
            if let Err(e) = handle.await {
                if e.is_panic() {
                    tracing::error!(
                        service = name,
                        "a background service of the engine panicked"
                    );
                }
            }
        }
    }
}

impl Engine {
    /// The background services started on this engine, and whether each still runs.
    pub fn services(&self) -> Vec<ServiceState> {
        self.services.states()
    }

    /// Waits for every background service to end: call it after [`Engine::shutdown`] (and after
    /// the runs have ended, or a hand-off, as the lease renewal and the fence last as long as a
    /// run does).
    pub async fn stopped(&self) {
        self.services.ended().await
    }

    /// Resolves once no task runs here (at once if none does): the tracker of runs, woken by the
    /// end of the last one, not a poll.
    pub async fn idle(&self) {
        loop {
            let ended = self.idle.notified();
            tokio::pin!(ended);
            // Registered before the look, so the end of the last run in between is not missed.
            ended.as_mut().enable();
            if self.running.is_empty() {
                return;
            }
            ended.await;
        }
    }

    /// Resolves once the engine is shut down and no task runs here.
    pub(super) async fn shut_down_and_idle(&self) {
        self.shutdown.cancelled().await;
        self.idle().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::{EngineConfig, NewTask, Outcome, TaskContext, TaskHandler};
    use async_trait::async_trait;
    use serde_json::{json, Value};
    use std::sync::Arc;
    use std::time::Duration;

    /// Returns once its gate opens, whatever it is told.
    struct Gated(Arc<tokio::sync::Semaphore>);

    #[async_trait]
    impl TaskHandler for Gated {
        async fn run(&self, _ctx: TaskContext, _args: Arc<Value>) -> Outcome {
            let _ = self.0.acquire().await;
            Outcome::Result {
                value: json!({}),
                is_error: false,
            }
        }
    }

    fn engine(gate: &Arc<tokio::sync::Semaphore>) -> Arc<Engine> {
        let config = EngineConfig {
            // Renewals and the sweep come round often, so that a loop left running shows.
            lease_ms: 300,
            sweep_interval: Duration::from_millis(100),
            ..Default::default()
        };
        Engine::builder(Arc::new(MemoryStore::new()), config)
            .handler("gated", Arc::new(Gated(gate.clone())), false)
            .build()
    }

    fn names(states: &[ServiceState], running: bool) -> Vec<&'static str> {
        let mut n: Vec<_> = states
            .iter()
            .filter(|s| s.running == running)
            .map(|s| s.name)
            .collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn each_service_starts_with_the_engine_and_ends_after_its_shutdown() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let engine = engine(&gate);
        assert!(engine.services().is_empty(), "nothing runs before start");
        engine.start().await.unwrap();
        assert_eq!(
            names(&engine.services(), true),
            ["lease renewal", "stopper", "sweeper"],
            "one store, one process: no take-over and no fence"
        );
        engine.shutdown();
        tokio::time::timeout(Duration::from_secs(2), engine.stopped())
            .await
            .expect("a service did not end after the shutdown");
        assert!(engine.services().is_empty(), "every handle was taken");
    }

    #[tokio::test]
    async fn the_lease_renewal_lasts_as_long_as_a_run_in_its_grace_and_idle_wakes_at_its_end() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let engine = engine(&gate);
        engine.start().await.unwrap();
        tokio::time::timeout(Duration::from_millis(100), engine.idle())
            .await
            .expect("idle with nothing running");
        engine
            .submit(NewTask::new("gated", json!({})))
            .await
            .unwrap();
        assert_eq!(engine.running_count(), 1);
        // Shut down while the run goes on: its lease is still renewed.
        engine.shutdown();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(names(&engine.services(), true), ["lease renewal"]);
        let idle = tokio::spawn({
            let engine = engine.clone();
            async move { engine.idle().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!idle.is_finished(), "idle while a task runs");
        let ended = std::time::Instant::now();
        gate.add_permits(1);
        tokio::time::timeout(Duration::from_secs(1), idle)
            .await
            .expect("idle was not woken by the end of the last run")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), engine.stopped())
            .await
            .expect("the lease renewal outlived the last run");
        // Woken, not found by a poll of the lease period.
        assert!(
            ended.elapsed() < Duration::from_millis(250),
            "{:?}",
            ended.elapsed()
        );
    }
}
