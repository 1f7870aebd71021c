//! Events for subscribers (the MCP Events extension's model, without its wire): a durable log of
//! named events, subscriptions that want some of them delivered to an endpoint, and the
//! deliveries that fan-out writes.
//!
//! An event is written in the same atomic step as what causes it: a task's status change writes
//! its task event ([`task_event`]) with the change, in every store's one task write; a tool's own
//! event is one append ([`EventStore::append_event`](crate::store::EventStore::append_event)). The
//! same step writes one delivery per live subscription the event matches ([`matches`]), so an
//! event committed has its deliveries committed with it and a crash loses none. Sending is the
//! server's (a delivery loop claims due deliveries under a lease, as for webhooks).
//!
//! The log is read in its order from a position ([`EventPosition`]): a poll or a stream hands
//! the last position back as its cursor. A store gives positions in commit order, so a reader
//! that saw position `p` never later finds a new event before `p`.

use serde_json::{Map, Value};
use std::fmt;

use crate::model::{TaskRecord, TaskStatus};
use crate::webhook::{EventSnapshot, WriteBase};

/// The event a task of the subscriber's makes when it ends (completed, failed or cancelled).
pub const TASK_FINISHED: &str = "task.finished";
/// The event a task of the subscriber's makes when it starts to wait for an answer.
pub const TASK_INPUT_REQUIRED: &str = "task.input_required";

/// Where an event stands in the log: positions order the log as it was committed. A store
/// with one writer numbers events one after another (`major` 0); PostgreSQL orders them by the
/// writing transaction, then by number within it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventPosition {
    /// The first key of the order.
    pub major: u64,
    /// The second key.
    pub minor: u64,
}

impl EventPosition {
    /// The position before every event.
    pub const START: EventPosition = EventPosition { major: 0, minor: 0 };

    /// The position as a cursor a client can hand back: `c` and the two keys in hex.
    pub fn cursor(self) -> String {
        format!("c{:x}.{:x}", self.major, self.minor)
    }

    /// Reads a cursor [`EventPosition::cursor`] made; `None` for anything else.
    pub fn parse(cursor: &str) -> Option<EventPosition> {
        let (major, minor) = cursor.strip_prefix('c')?.split_once('.')?;
        let key = |s: &str| {
            (!s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u64::from_str_radix(s, 16).ok())
                .flatten()
        };
        Some(EventPosition {
            major: key(major)?,
            minor: key(minor)?,
        })
    }
}

impl fmt::Display for EventPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cursor())
    }
}

/// An event to write.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// Its id, the same in every delivery and every read (`evt_` and 128 random bits).
    pub id: String,
    /// Its type, e.g. [`TASK_FINISHED`].
    pub name: String,
    /// Who may see it: only this principal, or (`None`) whoever may subscribe to its type.
    pub owner: Option<String>,
    /// The session of that task, if any: a reader who is told apart from others of its
    /// principal only by session (an anonymous caller) reads only its own session's events.
    pub session: Option<String>,
    /// The task it is about or that published it, if any.
    pub task_id: Option<String>,
    /// That task's tool, if any.
    pub tool: Option<String>,
    /// The values a subscription's filter is matched against (a tool event's payload fields its
    /// type lets subscribers filter on); empty for a task event.
    pub fields: Map<String, Value>,
    /// What it carries, as JSON text: a tool event's payload, a task event's [`EventSnapshot`]
    /// (the server renders the payload from it).
    pub data: String,
    /// When it happened, Unix ms.
    pub created_at: u64,
}

impl NewEvent {
    /// An event of type `name` carrying `data`, made now with a fresh id.
    pub fn new(name: impl Into<String>, data: &Value) -> NewEvent {
        NewEvent {
            id: format!("evt_{}", crate::ids::random_id()),
            name: name.into(),
            owner: None,
            session: None,
            task_id: None,
            tool: None,
            fields: Map::new(),
            data: data.to_string(),
            created_at: crate::clock::now_ms(),
        }
    }
}

/// An event as the log holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    /// Where it stands in the log.
    pub position: EventPosition,
    /// The event.
    pub event: NewEvent,
}

/// The event a write of `rec` makes, if its status changed (see [`WriteBase`]) to a terminal one
/// ([`TASK_FINISHED`]) or to waiting for input ([`TASK_INPUT_REQUIRED`]). Every store calls this
/// in its task write and writes what it returns, with its deliveries, in the same atomic step.
pub(crate) fn task_event(rec: &TaskRecord, base: WriteBase) -> Option<NewEvent> {
    if !base.was.is_some_and(|w| w != rec.status) {
        return None;
    }
    task_event_of(rec)
}

/// The event `rec`'s status makes, whatever it was before.
pub(crate) fn task_event_of(rec: &TaskRecord) -> Option<NewEvent> {
    let name = match rec.status {
        TaskStatus::Working => return None,
        TaskStatus::InputRequired => TASK_INPUT_REQUIRED,
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => TASK_FINISHED,
    };
    Some(NewEvent {
        id: format!("evt_{}", crate::ids::random_id()),
        name: name.to_string(),
        owner: Some(rec.owner.clone()),
        session: rec.session.clone(),
        task_id: Some(rec.id.clone()),
        tool: Some(rec.tool.clone()),
        fields: Map::new(),
        data: serde_json::to_string(&EventSnapshot::of(rec)).unwrap_or_default(),
        created_at: rec.updated_at,
    })
}

/// How a task's own events are made (set by the server, which knows the types it declared): the
/// event `task` publishes as `name` with `data`, or why it may not (an undeclared type, data that
/// does not match its schema). Without rules every publish is refused.
pub trait EventRules: Send + Sync {
    /// The event to append, or why not.
    fn event(&self, task: &TaskRecord, name: &str, data: &Value) -> Result<NewEvent, String>;
}

/// The rules of an engine that was given none: no type is declared.
pub struct NoEventTypes;

impl EventRules for NoEventTypes {
    fn event(&self, _task: &TaskRecord, name: &str, _data: &Value) -> Result<NewEvent, String> {
        Err(format!(
            "event type {name:?} is not declared by this server"
        ))
    }
}

/// Why a task's event was not published.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PublishError {
    /// The handler does not run as a task (a plain call): events come from tasks.
    #[error("a plain call publishes no events")]
    NotATask,
    /// The type or its data was refused (the rules' reason).
    #[error("the event was refused: {0}")]
    Refused(String),
    /// The store could not write it (rendered with its causes).
    #[error("the event could not be stored: {0}")]
    Store(String),
}

/// A subscription: one principal's wish to have the events of one type that match its filter
/// POSTed to an endpoint, signed with its secret. Its id is derived from (principal, url, name,
/// arguments) by the server, so subscribing again with the same ones refreshes it.
///
/// `Debug` leaves the secrets out.
#[derive(Clone, PartialEq)]
pub struct EventSubscription {
    /// Its id.
    pub id: String,
    /// Whose it is.
    pub principal: String,
    /// The event type.
    pub name: String,
    /// The arguments as the client gave them (canonical JSON): shown to operators.
    pub arguments: String,
    /// Only this task's events, if set.
    pub task_id: Option<String>,
    /// Only events of this tool's tasks, if set.
    pub tool: Option<String>,
    /// Only events whose fields hold these values (each named field equal).
    pub filter: Map<String, Value>,
    /// Where deliveries go.
    pub url: String,
    /// What signs them: `whsec_…`, as the server stores it (it may be sealed).
    pub secret: String,
    /// The secret it replaced at the last refresh, also signing until `previous_until`.
    pub previous_secret: Option<String>,
    /// Until when (Unix ms) the previous secret signs too.
    pub previous_until: Option<u64>,
    /// When it was first made, Unix ms.
    pub created_at: u64,
    /// When it was last made or refreshed, Unix ms.
    pub refreshed_at: u64,
    /// When it ends, Unix ms; `None`: when its client unsubscribes.
    pub expires_at: Option<u64>,
    /// Only events after this position are delivered (set by the store from the
    /// [`SubscriptionStart`] it was put with).
    pub from: EventPosition,
    /// When an event last reached it, Unix ms.
    pub last_delivery_at: Option<u64>,
    /// What kind of failure its last attempt met (`timeout`, `http_5xx`, …), `None` after a success.
    pub last_error: Option<String>,
    /// Since when its attempts have failed without a success between, Unix ms.
    pub failed_since: Option<u64>,
}

impl EventSubscription {
    /// Whether it still gets events at `now`.
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

impl fmt::Debug for EventSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSubscription")
            .field("id", &self.id)
            .field("principal", &self.principal)
            .field("name", &self.name)
            .field("arguments", &self.arguments)
            .field("url", &self.url)
            .field("expires_at", &self.expires_at)
            .field("from", &self.from)
            .field("last_error", &self.last_error)
            .finish_non_exhaustive()
    }
}

/// Whether `event` goes to `sub`: the same type, seen by its principal, after its start, and
/// each of its filters met. Every store fans out by this rule (the SQL ones in SQL: the test kit
/// holds them to it).
pub fn matches(sub: &EventSubscription, event: &StoredEvent) -> bool {
    let e = &event.event;
    sub.name == e.name
        && e.owner.as_ref().is_none_or(|o| *o == sub.principal)
        && event.position > sub.from
        && sub.is_live(e.created_at)
        && sub
            .task_id
            .as_ref()
            .is_none_or(|t| e.task_id.as_ref() == Some(t))
        && sub.tool.as_ref().is_none_or(|t| e.tool.as_ref() == Some(t))
        && sub
            .filter
            .iter()
            .all(|(k, v)| e.fields.get(k).is_some_and(|f| same_scalar(f, v)))
}

/// Whether two filter values are equal (numbers by value: `1` is `1.0`, as SQL compares them).
pub(crate) fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// What [`EventStore::put_subscription`](crate::store::EventStore::put_subscription) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionPut {
    /// A new subscription was stored.
    New,
    /// An existing one (same id) was refreshed.
    Refreshed,
}

/// Where a stored subscription's deliveries start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionStart {
    /// With the events committed after it is stored (the store sets [`EventSubscription::from`]
    /// in the same step).
    Now,
    /// With the events after this position: those already in the log get their deliveries in
    /// the same step (a replay).
    After(EventPosition),
    /// Where the stored subscription starts (a refresh that moves nothing); `Now` for a new one.
    Kept,
}

/// What a put of a subscription did, and where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subscribed {
    /// New or refreshed.
    pub put: SubscriptionPut,
    /// Where its deliveries start.
    pub from: EventPosition,
    /// Whether events after the position asked for were purged: a replay misses them.
    pub truncated: bool,
}

/// A read of the log: events of one type after a position, that one principal may see and that
/// match a filter (the same rule as [`matches`], with `principal` for the subscriber).
#[derive(Clone, Debug, PartialEq)]
pub struct EventQuery {
    /// The event type.
    pub name: String,
    /// Who reads: events only another principal may see are left out.
    pub principal: String,
    /// Only events of this session, if set (a reader told apart only by session).
    pub session: Option<String>,
    /// Only this task's events, if set.
    pub task_id: Option<String>,
    /// Only events of this tool's tasks, if set.
    pub tool: Option<String>,
    /// Only events whose fields hold these values.
    pub filter: Map<String, Value>,
    /// Events after this position.
    pub after: EventPosition,
    /// At most this many.
    pub limit: usize,
}

/// A page of the log.
#[derive(Clone, Debug, PartialEq)]
pub struct EventPage {
    /// The events found, in log order.
    pub events: Vec<StoredEvent>,
    /// Where the next read goes on from: the last event's position, or (none found) the
    /// position the read got to.
    pub next: EventPosition,
    /// Whether more may follow at once (the page is full).
    pub more: bool,
    /// Whether events after the position asked for were purged before this read: some are lost
    /// to the reader.
    pub truncated: bool,
}

/// One delivery of one event to one subscription, as a claim hands it over.
#[derive(Clone, Debug, PartialEq)]
pub struct EventDelivery {
    /// The subscription, as stored now (its URL and secrets sign and address the POST).
    pub subscription: EventSubscription,
    /// The event.
    pub event: StoredEvent,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the delivery was written, Unix ms.
    pub created_at: u64,
}

/// A subscription's gap still to be told: a delivery to it was given up after being tried
/// (see [`EventStore::due_event_gaps`](crate::store::EventStore::due_event_gaps)).
#[derive(Clone, Debug, PartialEq)]
pub struct EventGap {
    /// The subscription, as stored now (its URL and secrets sign and address the envelope).
    pub subscription: EventSubscription,
    /// The latest position whose delivery was given up: what identifies the gap, so that one
    /// noted while it was being told is not forgotten with it.
    pub missed: EventPosition,
    /// The cursor to tell: the later of [`EventGap::missed`] and the latest position delivered
    /// to the subscription, so that a receiver keeping it never moves back.
    pub cursor: EventPosition,
    /// Times it was claimed to be told (each claim is an attempt).
    pub attempts: u32,
}

/// A delivery for an operator: which event to which subscription, and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct EventDeliveryState {
    /// The subscription.
    pub subscription: String,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub name: String,
    /// Where it stands.
    pub state: crate::webhook::DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is due next (pending only), Unix ms.
    pub next_at: u64,
    /// When it was written, Unix ms.
    pub created_at: u64,
    /// What the last attempt got, if it got an answer.
    pub last_status: Option<u16>,
    /// The kind of failure the last attempt met.
    pub last_error: Option<String>,
}

/// What a purge of the event log removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventsPurged {
    /// Events written before the bound.
    pub events: usize,
    /// Subscriptions past their end.
    pub subscriptions: usize,
    /// Deliveries: the settled ones written before the bound, and every one of the
    /// subscriptions that ended.
    pub deliveries: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let p = EventPosition {
            major: 0x1f,
            minor: 42,
        };
        assert_eq!(p.cursor(), "c1f.2a");
        assert_eq!(EventPosition::parse("c1f.2a"), Some(p));
        for bad in [
            "",
            "c",
            "c1",
            "c.1",
            "c1.",
            "1.2",
            "cz.1",
            "c1.2.3",
            "c11111111111111111.1",
        ] {
            assert_eq!(EventPosition::parse(bad), None, "{bad}");
        }
    }

    fn sub() -> EventSubscription {
        EventSubscription {
            id: "sub_1".into(),
            principal: "alice".into(),
            name: "build.finished".into(),
            arguments: "{}".into(),
            task_id: None,
            tool: None,
            filter: Map::new(),
            url: "https://a.example/".into(),
            secret: "whsec_x".into(),
            previous_secret: None,
            previous_until: None,
            created_at: 0,
            refreshed_at: 0,
            expires_at: Some(10_000),
            from: EventPosition { major: 0, minor: 5 },
            last_delivery_at: None,
            last_error: None,
            failed_since: None,
        }
    }

    fn event(minor: u64, fields: Value) -> StoredEvent {
        let mut e = NewEvent::new("build.finished", &json!({}));
        e.created_at = 1_000;
        e.fields = fields.as_object().cloned().unwrap_or_default();
        StoredEvent {
            position: EventPosition { major: 0, minor },
            event: e,
        }
    }

    #[test]
    fn a_subscription_gets_the_later_events_it_may_see_that_meet_its_filter() {
        let mut s = sub();
        s.filter.insert("branch".into(), json!("main"));
        s.filter.insert("n".into(), json!(1));
        assert!(matches(&s, &event(6, json!({"branch": "main", "n": 1.0}))));
        assert!(!matches(&s, &event(5, json!({"branch": "main", "n": 1}))));
        assert!(!matches(&s, &event(6, json!({"branch": "dev", "n": 1}))));
        assert!(!matches(&s, &event(6, json!({"branch": "main"}))));
        let mut theirs = event(6, json!({"branch": "main", "n": 1}));
        theirs.event.owner = Some("bob".into());
        assert!(!matches(&s, &theirs));
        theirs.event.owner = Some("alice".into());
        assert!(matches(&s, &theirs));
        let mut late = event(6, json!({"branch": "main", "n": 1}));
        late.event.created_at = 10_000;
        assert!(!matches(&s, &late), "written once the subscription ended");
    }
}
