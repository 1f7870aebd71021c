//! Client sessions of the 2025 wire: negotiated version, client capabilities, log level.
//!
//! A session is a record in the task store, so any node can serve any request of it; this node keeps
//! a cache of the ones it has seen.

use dashmap::DashMap;
use mcp_tasks_engine::store::{SessionLimit, SessionRecord, StoreError, TaskStore};
use mcp_tasks_engine::{now_ms, random_id, LogLevel};
use mcp_tasks_protocol::version;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How often at most `last_seen` is written back for a busy session (a session with a short idle
/// limit: ten times within it).
const TOUCH_EVERY_MS: u64 = 60_000;

/// What the server remembers about a session.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SessionData {
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// The client's declared capabilities.
    pub client_capabilities: Value,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// Minimum level of log messages sent to this client.
    pub log_level: LogLevel,
    /// Whether the client opted into Asynchronous Tool Execution at `initialize`.
    #[serde(default)]
    pub async_tools: bool,
}

/// A live session.
#[derive(Debug)]
pub struct Session {
    /// Random id (the `Mcp-Session-Id`).
    pub id: String,
    /// Principal that opened it.
    pub owner: String,
    /// Creation time.
    pub created_at: u64,
    /// Its own idle limit (anonymous sessions), in ms; `None`: the server's.
    pub idle_ms: Option<u64>,
    data: Mutex<SessionData>,
    /// When `last_seen` was last written to the store.
    last_touch: Mutex<u64>,
    /// When it was last used here (Unix ms).
    last_used: AtomicU64,
}

/// What a new anonymous session is held to.
pub(crate) struct Budgeted {
    /// The start of its id, the same for every session of one client address.
    pub(crate) id_prefix: String,
    /// Its idle limit, in ms.
    pub(crate) idle_ms: u64,
    /// The caps on live sessions it must fit under.
    pub(crate) limit: SessionLimit,
}

impl Session {
    /// The negotiated version.
    pub fn protocol_version(&self) -> String {
        self.data().protocol_version
    }
    /// Whether this session speaks 2025-11-25 tasks.
    pub fn has_tasks(&self) -> bool {
        version::has_session_tasks(&self.data().protocol_version)
    }
    /// A copy of the session's data.
    pub fn data(&self) -> SessionData {
        self.data.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// Minimum log level for this client.
    pub fn log_level(&self) -> LogLevel {
        self.data().log_level
    }
    /// Whether the client opted into Asynchronous Tool Execution.
    pub fn async_tools(&self) -> bool {
        self.data().async_tools
    }
    /// The start of its id that it shares with its client address's other sessions (anonymous
    /// sessions only): what their limits are counted under.
    pub fn group_prefix(&self) -> Option<&str> {
        self.id.find('-').map(|i| &self.id[..=i])
    }
    fn record(&self) -> SessionRecord {
        SessionRecord {
            id: self.id.clone(),
            owner: self.owner.clone(),
            data: serde_json::to_value(self.data()).unwrap_or(Value::Null),
            created_at: self.created_at,
            last_seen: now_ms(),
            idle_ms: self.idle_ms,
        }
    }
    /// Whether it has been unused for its idle limit at `now` (`default_idle_ms` without its own).
    fn is_idle(&self, now: u64, default_idle_ms: u64) -> bool {
        let idle = self.idle_ms.unwrap_or(default_idle_ms);
        now.saturating_sub(self.last_used.load(Ordering::Relaxed)) >= idle
    }
    /// How often its use is written to the store.
    fn touch_every(&self) -> u64 {
        self.idle_ms
            .map_or(TOUCH_EVERY_MS, |idle| TOUCH_EVERY_MS.min(idle / 10))
    }
}

/// The sessions this node knows, backed by the store.
pub struct Sessions {
    store: Arc<dyn TaskStore>,
    cache: DashMap<String, Arc<Session>>,
}

impl Sessions {
    /// How many sessions this process holds now.
    pub fn held(&self) -> usize {
        self.cache.len()
    }
    /// A cache over `store`.
    pub fn new(store: Arc<dyn TaskStore>) -> Sessions {
        Sessions {
            store,
            cache: DashMap::new(),
        }
    }

    /// Creates and stores a session; one `budgeted` (anonymous) only within its caps
    /// ([`StoreError::TooManySessions`] otherwise).
    pub(crate) async fn create(
        &self,
        owner: &str,
        data: SessionData,
        budgeted: Option<Budgeted>,
    ) -> Result<Arc<Session>, StoreError> {
        let now = now_ms();
        let id = match &budgeted {
            Some(b) => format!("{}{}", b.id_prefix, random_id()),
            None => random_id(),
        };
        let s = Arc::new(Session {
            id,
            owner: owner.to_string(),
            created_at: now,
            idle_ms: budgeted.as_ref().map(|b| b.idle_ms),
            data: Mutex::new(data),
            last_touch: Mutex::new(now),
            last_used: AtomicU64::new(now),
        });
        match &budgeted {
            Some(b) => self.store.create_session(&s.record(), &b.limit).await?,
            None => self.store.put_session(&s.record()).await?,
        }
        self.cache.insert(s.id.clone(), s.clone());
        Ok(s)
    }

    /// Finds a session by id (cache, then store), refreshing its idle timer now and then.
    pub async fn get(&self, id: &str) -> Result<Option<Arc<Session>>, StoreError> {
        let cached = self.cache.get(id).map(|s| s.clone());
        let s = match cached {
            Some(s) => s,
            None => {
                let Some(rec) = self.store.get_session(id).await? else {
                    return Ok(None);
                };
                let Ok(data) = serde_json::from_value::<SessionData>(rec.data) else {
                    return Ok(None);
                };
                let s = Arc::new(Session {
                    id: rec.id,
                    owner: rec.owner,
                    created_at: rec.created_at,
                    idle_ms: rec.idle_ms,
                    data: Mutex::new(data),
                    last_touch: Mutex::new(rec.last_seen),
                    last_used: AtomicU64::new(rec.last_seen),
                });
                self.cache.insert(s.id.clone(), s.clone());
                s
            }
        };
        let now = now_ms();
        if s.idle_ms.is_some() && s.is_idle(now, u64::MAX) {
            // Past its own idle limit (which the store's purge may not have reached yet): ended.
            self.cache.remove(&s.id);
            self.store.delete_session(&s.id).await?;
            return Ok(None);
        }
        s.last_used.fetch_max(now, Ordering::Relaxed);
        let due = {
            let mut last = s.last_touch.lock().unwrap_or_else(|p| p.into_inner());
            if now.saturating_sub(*last) >= s.touch_every() {
                *last = now;
                true
            } else {
                false
            }
        };
        if due && !self.store.touch_session(&s.id, now).await? {
            // Purged from the store (idle too long) or deleted by another node: it is gone here too.
            self.cache.remove(&s.id);
            return Ok(None);
        }
        Ok(Some(s))
    }

    /// Changes the log level and stores it.
    pub async fn set_log_level(&self, s: &Session, level: LogLevel) -> Result<(), StoreError> {
        s.data.lock().unwrap_or_else(|p| p.into_inner()).log_level = level;
        self.store.put_session(&s.record()).await
    }

    /// Ends a session; returns whether it existed.
    pub async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let cached = self.cache.remove(id).is_some();
        Ok(self.store.delete_session(id).await? || cached)
    }

    /// Drops cached sessions unused for their idle limit (`idle_ms` for those without their own;
    /// the store purges them on its own schedule) and returns their ids.
    pub fn evict_idle(&self, idle_ms: u64) -> Vec<String> {
        let now = now_ms();
        let mut gone = Vec::new();
        self.cache.retain(|id, s| {
            let idle = s.is_idle(now, idle_ms);
            if idle {
                gone.push(id.clone());
            }
            !idle
        });
        gone
    }

    /// Counts `ids` as used now: a session whose client holds a stream open is not idle.
    pub(crate) async fn keep_alive(&self, ids: impl IntoIterator<Item = String>) {
        for id in ids {
            // A store error here only delays the touch to the next sweep.
            let _ = self.get(&id).await;
        }
    }

    /// A cached session without touching the store (for the notification router).
    pub fn cached(&self, id: &str) -> Option<Arc<Session>> {
        self.cache.get(id).map(|s| s.clone())
    }
}
