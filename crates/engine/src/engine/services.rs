//! The node's background services: named loops with handles, so that a stop can wait for each to
//! end and an operator (or a test) can see which run.
//!
//! [`Engine::start`] starts them: lease renewal, the sweeper, and on a store several nodes share
//! the take-over and the fence; the stopper is started by the first run or by `start`, whichever
//! comes first. Each ends once [`Engine::shutdown`] is called (the lease renewal and the fence only
//! once no run is left: runs in their grace keep their leases and their fence) or the engine is
//! dropped. [`Engine::stopped`] waits for all of them.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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

/// The services started on this engine, by name, with their handles, and how many still run.
#[derive(Default)]
pub(super) struct Services {
    handles: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
    /// Services whose loop has not returned, counted by the loop itself, so that a wait for them
    /// needs no handle: [`Services::ended`] may be dropped and called again.
    left: Arc<(AtomicUsize, tokio::sync::Notify)>,
}

/// Counts a service down when its loop returns (or is dropped with the runtime).
struct Running(Arc<(AtomicUsize, tokio::sync::Notify)>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0 .0.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0 .1.notify_waiters();
        }
    }
}

impl Services {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, JoinHandle<()>)>> {
        // Each change is one push: a poisoned lock holds a whole list.
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `service` as `name` on the current runtime.
    pub(super) fn spawn(
        &self,
        name: &'static str,
        service: impl Future<Output = ()> + Send + 'static,
    ) {
        self.left.0.fetch_add(1, Ordering::SeqCst);
        let running = Running(self.left.clone());
        let handle = tokio::spawn(async move {
            let _running = running;
            service.await
        });
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

    /// Waits for every service started so far to end. Cancel-safe: dropped and called again, it
    /// waits again.
    async fn ended(&self) {
        let (left, ended) = &*self.left;
        loop {
            let wake = ended.notified();
            tokio::pin!(wake);
            // Registered before the look, so the last service's end in between is not missed.
            wake.as_mut().enable();
            if left.load(Ordering::SeqCst) == 0 {
                return;
            }
            wake.await;
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

    fn engine(gate: &Arc<tokio::sync::Semaphore>, lease_ms: u64) -> Arc<Engine> {
        let config = EngineConfig {
            lease_ms,
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
        // Renewals come round often, so that a loop left running shows.
        let engine = engine(&gate, 300);
        assert!(engine.services().is_empty(), "nothing runs before start");
        engine.start().await.unwrap();
        assert_eq!(
            names(&engine.services(), true),
            ["lease renewal", "stopper", "sweeper"],
            "one store, one process: no take-over and no fence"
        );
        engine.shutdown();
        // A wait given up on and made again still waits (it holds no handle).
        let _ = tokio::time::timeout(Duration::from_millis(1), engine.stopped()).await;
        tokio::time::timeout(Duration::from_secs(2), engine.stopped())
            .await
            .expect("a service did not end after the shutdown");
        // `stopped` returns once each loop has returned; its task is done a moment later.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let states = engine.services();
        assert_eq!(states.len(), 3, "{states:?}");
        assert!(names(&states, true).is_empty(), "{states:?}");
    }

    #[tokio::test]
    async fn the_lease_renewal_lasts_as_long_as_a_run_in_its_grace_and_idle_wakes_at_its_end() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        // A long lease: a renewal loop that polled for the end of the runs would take 10 s.
        let engine = engine(&gate, 30_000);
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
        assert!(
            tokio::time::timeout(Duration::from_millis(100), engine.stopped())
                .await
                .is_err(),
            "stopped while a run goes on"
        );
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
        // Woken, not found by a poll of the lease period (10 s).
        assert!(
            ended.elapsed() < Duration::from_secs(2),
            "{:?}",
            ended.elapsed()
        );
    }
}
