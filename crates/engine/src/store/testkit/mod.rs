//! The contract test suite every [`TaskStore`](super::TaskStore) must pass, in one part per
//! concern: [`tasks`], [`inputs`], [`journal`], [`signals`], [`leases`], [`sessions`], [`outbox`]. Each part's
//! `run` needs only the sub-traits it tests, so a backend of one concern runs its part alone; a whole
//! store calls [`run_all`] from its own tests with a factory that makes a fresh, empty store.

pub mod events;
pub mod inputs;
pub mod journal;
pub mod leases;
pub mod outbox;
pub mod sessions;
pub mod signals;
pub mod tasks;

use serde_json::json;
use std::future::Future;
use std::sync::Arc;

use super::{PurgePolicy, TaskChange, TaskStore};
use crate::model::{InputRecord, Outcome, TaskRecord, TaskStatus};

/// A working task record with fixed fields, for tests.
pub fn record(id: &str, owner: &str, created_at: u64) -> TaskRecord {
    TaskRecord {
        id: id.to_string(),
        owner: owner.to_string(),
        session: Some("s1".into()),
        era: "test".into(),
        tool: "echo".into(),
        arguments: std::sync::Arc::new(json!({"x": 1})),
        request_meta: Arc::new(json!({"token": 7})),
        status: TaskStatus::Working,
        status_message: None,
        progress: None,
        progress_total: None,
        progress_message: None,
        retain_after_finish_ms: None,
        created_at,
        updated_at: created_at,
        ttl_ms: Some(60_000),
        poll_interval_ms: Some(500),
        outcome: None,
        idempotency_key: None,
        fingerprint: "fp".into(),
        attempt: 1,
        lease_owner: Some("node-a".into()),
        lease_until: Some(created_at + 30_000),
        finished_at: None,
        checkpoint: None,
        webhooks: Vec::new(),
    }
}

/// The change that completes a task with an empty result.
fn completed() -> TaskChange {
    TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(Outcome::Result {
            value: json!({}),
            is_error: false,
        }),
        ..Default::default()
    }
}

/// The change that fails a task with `message` (as its status message and its error).
fn failed(message: &str) -> TaskChange {
    TaskChange {
        status: Some(TaskStatus::Failed),
        status_message: Some(Some(message.into())),
        outcome: Some(Outcome::Error {
            code: 1,
            message: message.into(),
            data: None,
        }),
        ..Default::default()
    }
}

fn input(key: &str, task: &str, at: u64) -> InputRecord {
    InputRecord {
        key: key.into(),
        task_id: task.into(),
        method: "ask".into(),
        params: json!({"message": "ok?"}),
        created_at: at,
        response: None,
        answered_at: None,
    }
}

/// The operator's purge of every task finished before `at`, at `at`, keeping tombstones.
fn purge_finished_before(at: u64) -> PurgePolicy {
    PurgePolicy {
        now: at,
        finished_grace_ms: 0,
        tombstone_ms: 1 << 40,
        finished_before: Some(at),
    }
}

/// Runs every part of the contract, each test on a fresh store from `make`.
pub async fn run_all<S, F, Fut>(make: F)
where
    S: TaskStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    tasks::run(&make).await;
    inputs::run(&make).await;
    journal::run(&make).await;
    signals::run(&make).await;
    leases::run(&make).await;
    sessions::run(&make).await;
    outbox::run(&make).await;
    events::run(&make).await;
}
