//! The mcp-tasks task engine: durable tasks with a strict state machine, behind a storage trait.
//!
//! The engine knows tasks and nothing about the MCP wire: one era-agnostic [`TaskRecord`] per task,
//! stored once through [`TaskStore`](store::TaskStore) (in memory, or in SQLite with group commit), executed by
//! [`Engine`] under a lease, with wake-ups through a [`Notifier`] rather than polling.
//!
//! ```no_run
//! use std::sync::Arc;
//! use mcp_tasks_engine::{Engine, EngineConfig, NewTask, Outcome, TaskContext, TaskHandler};
//! use mcp_tasks_engine::store::memory::MemoryStore;
//!
//! struct Echo;
//! #[async_trait::async_trait]
//! impl TaskHandler for Echo {
//!     async fn run(&self, ctx: TaskContext, args: Arc<serde_json::Value>) -> Outcome {
//!         ctx.progress(1.0, Some(1.0), None).await;
//!         Outcome::Result { value: (*args).clone(), is_error: false }
//!     }
//! }
//!
//! # async fn demo() {
//! let engine = Engine::builder(Arc::new(MemoryStore::new()), EngineConfig::default())
//!     .handler("echo", Arc::new(Echo), false)
//!     .build();
//! let created = engine.submit(NewTask::new("echo", serde_json::json!({"x": 1}))).await.unwrap();
//! let done = engine.wait_terminal(&created.record.id).await.unwrap();
//! assert_eq!(done.status, mcp_tasks_engine::TaskStatus::Completed);
//! # }
//! ```

#![deny(missing_docs)]

mod clock;
mod context;
mod engine;
pub mod events;
mod fingerprint;
mod handler;
mod ids;
mod journal;
mod model;
mod notifier;
mod rules;
pub mod store;
pub mod trace;
pub mod webhook;

pub use clock::{format_rfc3339, now_ms};
pub use context::{
    CheckpointError, ContextSink, InputError, LogLevel, StepEntry, StepError, StepJournal,
    StepSlot, StopReason, TaskContext,
};
pub use engine::{
    Engine, EngineBuilder, EngineConfig, EngineError, InputGuard, ResumeCounts, Rewind, Rewound,
    RunStart, ServiceState, SignalError, SignalSend, SignalSent, SignalUrls, Submitted,
    MAX_SIGNAL_BYTES, MAX_SIGNAL_KEY, MAX_SIGNAL_NAME,
};
pub use fingerprint::fingerprint;
pub use handler::TaskHandler;
pub use ids::random_id;
pub use journal::{
    replay_check, JournalExport, ReplayCheckError, ReplayEnd, ReplayReport, RetryPolicy, Retryable,
    Signal, StepFailed, StepOptions,
};
pub use model::{
    ActiveLimit, Among, HeldLimit, InputRecord, InputResponse, NewSignal, NewTask, Outcome,
    SignalRecord, StepRecord, TaskRecord, TaskStatus, Transition,
};
pub use notifier::{
    Notifier, Relayed, TaskEvent, TaskSubscription, WaitersOnly, Watch, WatchEverything,
};
pub use rules::{OutcomeRules, PlainRules};
pub use store::{error_chain, ProgressUpdate};
