//! Client sessions of the 2025 wire: negotiated version, client capabilities, log level.
//!
//! A session is a record in the task store, so any node can serve any request of it; this node keeps
//! a cache of the ones it has seen.

use dashmap::DashMap;
use mcp_tasks_engine::store::{SessionRecord, StoreError, TaskStore};
use mcp_tasks_engine::{now_ms, random_id, LogLevel};
use mcp_tasks_protocol::version;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// How often at most `last_seen` is written back for a busy session.
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
    data: Mutex<SessionData>,
    last_touch: Mutex<u64>,
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
    fn record(&self) -> SessionRecord {
        SessionRecord {
            id: self.id.clone(),
            owner: self.owner.clone(),
            data: serde_json::to_value(self.data()).unwrap_or(Value::Null),
            created_at: self.created_at,
            last_seen: now_ms(),
        }
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

    /// Creates and stores a session.
    pub async fn create(&self, owner: &str, data: SessionData) -> Result<Arc<Session>, StoreError> {
        let now = now_ms();
        let s = Arc::new(Session {
            id: random_id(),
            owner: owner.to_string(),
            created_at: now,
            data: Mutex::new(data),
            last_touch: Mutex::new(now),
        });
        self.store.put_session(&s.record()).await?;
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
                    data: Mutex::new(data),
                    last_touch: Mutex::new(rec.last_seen),
                });
                self.cache.insert(s.id.clone(), s.clone());
                s
            }
        };
        let now = now_ms();
        let due = {
            let mut last = s.last_touch.lock().unwrap_or_else(|p| p.into_inner());
            if now.saturating_sub(*last) >= TOUCH_EVERY_MS {
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

    /// Drops cached sessions unused for `idle_ms` (the store purges them on its own schedule).
    pub fn evict_idle(&self, idle_ms: u64) {
        let now = now_ms();
        self.cache.retain(|_, s| {
            now.saturating_sub(*s.last_touch.lock().unwrap_or_else(|p| p.into_inner())) < idle_ms
        });
    }

    /// A cached session without touching the store (for the notification router).
    pub fn cached(&self, id: &str) -> Option<Arc<Session>> {
        self.cache.get(id).map(|s| s.clone())
    }
}
