//! The memory store's event log ([`crate::events`]): events by number, subscriptions, verified
//! endpoints and deliveries, under the store's one lock (so an event and its deliveries are
//! written in one step, with the task change that made it).

use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};

use super::MemoryStore;
use crate::events::{
    matches, EventDelivery, EventDeliveryState, EventGap, EventPage, EventPosition, EventQuery,
    EventSubscription, EventsPurged, NewEvent, StoredEvent, Subscribed, SubscriptionPut,
    SubscriptionStart,
};
use crate::store::{EventStore, StoreError};
use crate::webhook::{DeliveryAttempt, DeliveryNext, DeliveryState};

/// The log and what hangs off it.
#[derive(Default)]
pub(super) struct EventLog {
    /// Events by number (their position's `minor`).
    events: BTreeMap<u64, NewEvent>,
    /// The last number given.
    last: u64,
    /// The highest number purged.
    purged_through: u64,
    subscriptions: HashMap<String, EventSubscription>,
    /// (principal, url) → verified until.
    verified: HashMap<(String, String), u64>,
    /// (subscription, event number) → the delivery.
    deliveries: BTreeMap<(String, u64), Pending>,
    /// subscription → its gap still to be told.
    gaps: HashMap<String, Gap>,
}

/// A gap as this store keeps it (see [`EventGap`]).
struct Gap {
    missed: EventPosition,
    next_at: u64,
    attempts: u32,
}

/// One delivery as this store keeps it.
struct Pending {
    state: DeliveryState,
    attempts: u32,
    next_at: u64,
    created_at: u64,
    lease: Option<(String, u64)>,
    last_status: Option<u16>,
    last_error: Option<String>,
}

fn position(n: u64) -> EventPosition {
    EventPosition { major: 0, minor: n }
}

impl EventLog {
    /// Appends `event` with a delivery to each subscription it matches.
    pub(super) fn append(&mut self, event: NewEvent) -> EventPosition {
        self.last += 1;
        let n = self.last;
        let stored = StoredEvent {
            position: position(n),
            event,
        };
        for sub in self.subscriptions.values() {
            if matches(sub, &stored) {
                self.deliveries.insert(
                    (sub.id.clone(), n),
                    Pending {
                        state: DeliveryState::Pending,
                        attempts: 0,
                        next_at: stored.event.created_at,
                        created_at: stored.event.created_at,
                        lease: None,
                        last_status: None,
                        last_error: None,
                    },
                );
            }
        }
        self.events.insert(n, stored.event);
        position(n)
    }

    fn stored(&self, n: u64) -> Option<StoredEvent> {
        self.events.get(&n).map(|e| StoredEvent {
            position: position(n),
            event: e.clone(),
        })
    }
}

#[async_trait]
impl EventStore for MemoryStore {
    async fn append_event(&self, event: NewEvent) -> Result<EventPosition, StoreError> {
        Ok(self.lock().events.append(event))
    }

    async fn read_events(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        let inner = self.lock();
        let log = &inner.events;
        // The reader as a subscription from `after`, live at every event: the same rule.
        let reader = EventSubscription {
            id: String::new(),
            principal: q.principal.clone(),
            name: q.name.clone(),
            arguments: String::new(),
            task_id: q.task_id.clone(),
            tool: q.tool.clone(),
            filter: q.filter.clone(),
            url: String::new(),
            secret: String::new(),
            previous_secret: None,
            previous_until: None,
            created_at: 0,
            refreshed_at: 0,
            expires_at: None,
            from: q.after,
            last_delivery_at: None,
            last_error: None,
            failed_since: None,
        };
        let start = if q.after.major > 0 {
            u64::MAX
        } else {
            q.after.minor
        };
        let mut events = Vec::new();
        let mut more = false;
        for (&n, _) in log.events.range(start.saturating_add(1)..) {
            let Some(e) = log.stored(n) else { continue };
            let own_session = q.session.is_none() || e.event.session == q.session;
            if own_session && matches(&reader, &e) {
                if events.len() == q.limit {
                    more = true;
                    break;
                }
                events.push(e);
            }
        }
        let next = match events.last() {
            Some(e) if more => e.position,
            _ => position(log.last).max(q.after),
        };
        Ok(EventPage {
            events,
            next,
            more,
            truncated: q.after.minor < log.purged_through,
        })
    }

    async fn event_horizon(&self) -> Result<EventPosition, StoreError> {
        Ok(position(self.lock().events.last))
    }

    async fn put_subscription(
        &self,
        sub: &EventSubscription,
        start: SubscriptionStart,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let mut inner = self.lock();
        let log = &mut inner.events;
        let existing = log.subscriptions.get(&sub.id).cloned();
        if existing.is_none() {
            let live = log
                .subscriptions
                .values()
                .filter(|s| s.principal == sub.principal && s.is_live(sub.refreshed_at))
                .count();
            if live >= max {
                return Err(StoreError::TooManySubscriptions { live, max });
            }
        }
        let from = match (start, &existing) {
            (SubscriptionStart::After(p), _) => p,
            (SubscriptionStart::Kept, Some(old)) => old.from,
            _ => position(log.last),
        };
        let mut new = sub.clone();
        new.from = from;
        if let Some(old) = &existing {
            new.created_at = old.created_at;
            new.last_delivery_at = old.last_delivery_at;
            new.last_error = old.last_error.clone();
            new.failed_since = old.failed_since;
        }
        // A replay: the events already in the log after `from` are delivered too.
        let mut truncated = false;
        if let SubscriptionStart::After(p) = start {
            truncated = p.major == 0 && p.minor < log.purged_through;
            // The client says where it stands, and what it missed after that is replayed: its
            // gap is told by this answer, not an envelope.
            log.gaps.remove(&new.id);
            // Deliveries given up on (or gone) before are tried again.
            for ((s, n), d) in log.deliveries.iter_mut() {
                if *s == new.id
                    && *n > p.minor
                    && !matches!(d.state, DeliveryState::Pending | DeliveryState::Delivered)
                {
                    d.state = DeliveryState::Pending;
                    d.attempts = 0;
                    d.next_at = new.refreshed_at;
                    d.lease = None;
                }
            }
            let replayed: Vec<u64> = log
                .events
                .keys()
                .copied()
                .filter(|n| {
                    !log.deliveries.contains_key(&(new.id.clone(), *n))
                        && log.stored(*n).is_some_and(|e| matches(&new, &e))
                })
                .collect();
            for n in replayed {
                log.deliveries.insert(
                    (new.id.clone(), n),
                    Pending {
                        state: DeliveryState::Pending,
                        attempts: 0,
                        next_at: new.refreshed_at,
                        created_at: new.refreshed_at,
                        lease: None,
                        last_status: None,
                        last_error: None,
                    },
                );
            }
        }
        log.subscriptions.insert(new.id.clone(), new);
        Ok(Subscribed {
            put: if existing.is_some() {
                SubscriptionPut::Refreshed
            } else {
                SubscriptionPut::New
            },
            from,
            truncated,
        })
    }

    async fn fan_out_events(&self, _limit: usize) -> Result<usize, StoreError> {
        // Deliveries are written with each event (`EventLog::append`), under the same lock.
        Ok(0)
    }

    async fn get_subscription(&self, id: &str) -> Result<Option<EventSubscription>, StoreError> {
        Ok(self.lock().events.subscriptions.get(id).cloned())
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let log = &mut inner.events;
        let existed = log.subscriptions.remove(id).is_some();
        log.deliveries.retain(|(s, _), _| s != id);
        log.gaps.remove(id);
        Ok(existed)
    }

    async fn subscriptions(
        &self,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventSubscription>, StoreError> {
        let inner = self.lock();
        let mut subs: Vec<EventSubscription> = inner
            .events
            .subscriptions
            .values()
            .filter(|s| principal.is_none_or(|p| s.principal == p))
            .cloned()
            .collect();
        subs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        subs.truncate(limit);
        Ok(subs)
    }

    async fn put_verification(
        &self,
        principal: &str,
        url: &str,
        until: u64,
    ) -> Result<(), StoreError> {
        self.lock()
            .events
            .verified
            .insert((principal.to_string(), url.to_string()), until);
        Ok(())
    }

    async fn verification(&self, principal: &str, url: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .lock()
            .events
            .verified
            .get(&(principal.to_string(), url.to_string()))
            .copied())
    }

    async fn claim_event_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<EventDelivery>, StoreError> {
        let mut inner = self.lock();
        let log = &mut inner.events;
        let mut due: Vec<(u64, String, u64)> = log
            .deliveries
            .iter()
            .filter(|(_, d)| {
                d.state == DeliveryState::Pending
                    && d.next_at <= now
                    && d.lease
                        .as_ref()
                        .is_none_or(|(owner, until)| owner == node || *until <= now)
            })
            .map(|((s, n), d)| (d.next_at, s.clone(), *n))
            .collect();
        due.sort_unstable();
        let mut claimed = Vec::new();
        for (_, s, n) in due {
            if claimed.len() == limit {
                break;
            }
            let (Some(sub), Some(event)) = (log.subscriptions.get(&s).cloned(), log.stored(n))
            else {
                continue;
            };
            let Some(d) = log.deliveries.get_mut(&(s, n)) else {
                continue;
            };
            d.lease = Some((node.to_string(), lease_until));
            claimed.push(EventDelivery {
                subscription: sub,
                event,
                attempts: d.attempts,
                created_at: d.created_at,
            });
        }
        Ok(claimed)
    }

    async fn finish_event_delivery(
        &self,
        subscription: &str,
        event_id: &str,
        node: &str,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
        failure: Option<&str>,
        keep_gap: bool,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let log = &mut inner.events;
        let Some(n) = log
            .deliveries
            .range((subscription.to_string(), 0)..=(subscription.to_string(), u64::MAX))
            .map(|((_, n), _)| *n)
            .find(|n| log.events.get(n).is_some_and(|e| e.id == event_id))
        else {
            return Ok(false);
        };
        let Some(d) = log.deliveries.get_mut(&(subscription.to_string(), n)) else {
            return Ok(false);
        };
        if d.state != DeliveryState::Pending
            || d.lease.as_ref().is_none_or(|(owner, _)| owner != node)
        {
            return Ok(false);
        }
        d.lease = None;
        d.attempts += 1;
        d.last_status = attempt.status;
        d.last_error = failure.map(str::to_string);
        let (state, next_at, _) = next.settles(attempt.at);
        d.state = state;
        d.next_at = next_at.unwrap_or(d.next_at);
        if keep_gap && next == DeliveryNext::GiveUp {
            let gap = log.gaps.entry(subscription.to_string()).or_insert(Gap {
                missed: position(n),
                next_at: attempt.at,
                attempts: 0,
            });
            gap.missed = gap.missed.max(position(n));
        }
        if let Some(sub) = log.subscriptions.get_mut(subscription) {
            match (next, failure) {
                (DeliveryNext::Delivered, _) => {
                    sub.last_delivery_at = Some(attempt.at);
                    sub.last_error = None;
                    sub.failed_since = None;
                }
                (_, Some(kind)) => {
                    sub.last_error = Some(kind.to_string());
                    sub.failed_since.get_or_insert(attempt.at);
                }
                // A give-up for another reason says nothing of the endpoint.
                (_, None) => {}
            }
        }
        Ok(true)
    }

    async fn event_deliveries(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<EventDeliveryState>, StoreError> {
        let inner = self.lock();
        let log = &inner.events;
        Ok(log
            .deliveries
            .range((subscription.to_string(), 0)..=(subscription.to_string(), u64::MAX))
            .rev()
            .take(limit)
            .map(|((s, n), d)| {
                let e = log.events.get(n);
                EventDeliveryState {
                    subscription: s.clone(),
                    event_id: e.map(|e| e.id.clone()).unwrap_or_default(),
                    name: e.map(|e| e.name.clone()).unwrap_or_default(),
                    state: d.state,
                    attempts: d.attempts,
                    next_at: d.next_at,
                    created_at: d.created_at,
                    last_status: d.last_status,
                    last_error: d.last_error.clone(),
                }
            })
            .collect())
    }

    async fn release_event_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        let mut inner = self.lock();
        let mut n = 0;
        for d in inner.events.deliveries.values_mut() {
            if d.state == DeliveryState::Pending
                && d.lease.as_ref().is_some_and(|(owner, _)| owner == node)
            {
                d.lease = None;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn due_event_gaps(&self, now: u64, limit: usize) -> Result<Vec<EventGap>, StoreError> {
        let inner = self.lock();
        let log = &inner.events;
        let mut due: Vec<(u64, EventGap)> = log
            .gaps
            .iter()
            .filter(|(_, g)| g.next_at <= now)
            .filter_map(|(id, g)| {
                let sub = log.subscriptions.get(id).filter(|s| s.is_live(now))?;
                let delivered = log
                    .deliveries
                    .range((id.clone(), 0)..=(id.clone(), u64::MAX))
                    .filter(|(_, d)| d.state == DeliveryState::Delivered)
                    .map(|((_, n), _)| position(*n))
                    .max()
                    .unwrap_or(EventPosition::START);
                Some((
                    g.next_at,
                    EventGap {
                        subscription: sub.clone(),
                        missed: g.missed,
                        cursor: g.missed.max(delivered),
                        attempts: g.attempts,
                    },
                ))
            })
            .collect();
        due.sort_by(|a, b| (a.0, &a.1.subscription.id).cmp(&(b.0, &b.1.subscription.id)));
        Ok(due.into_iter().take(limit).map(|(_, g)| g).collect())
    }

    async fn claim_event_gap(
        &self,
        subscription: &str,
        now: u64,
        retry_at: u64,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        match inner.events.gaps.get_mut(subscription) {
            Some(g) if g.next_at <= now => {
                g.next_at = retry_at;
                g.attempts += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn forget_event_gap(
        &self,
        subscription: &str,
        missed: EventPosition,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let gaps = &mut inner.events.gaps;
        if gaps.get(subscription).is_some_and(|g| g.missed == missed) {
            gaps.remove(subscription);
            return Ok(true);
        }
        Ok(false)
    }

    async fn purge_events(&self, now: u64, before: u64) -> Result<EventsPurged, StoreError> {
        let mut inner = self.lock();
        let log = &mut inner.events;
        let mut purged = EventsPurged::default();
        let ended: Vec<String> = log
            .subscriptions
            .values()
            .filter(|s| !s.is_live(now))
            .map(|s| s.id.clone())
            .collect();
        for id in &ended {
            log.subscriptions.remove(id);
            log.gaps.remove(id);
        }
        purged.subscriptions = ended.len();
        log.verified.retain(|_, until| *until > now);
        let n = log.deliveries.len();
        log.deliveries.retain(|(s, _), d| {
            log.subscriptions.contains_key(s)
                && (d.state == DeliveryState::Pending || d.created_at >= before)
        });
        purged.deliveries = n - log.deliveries.len();
        let needed: std::collections::HashSet<u64> = log
            .deliveries
            .iter()
            .filter(|(_, d)| d.state == DeliveryState::Pending)
            .map(|((_, n), _)| *n)
            .collect();
        let old: Vec<u64> = log
            .events
            .iter()
            .filter(|(n, e)| e.created_at < before && !needed.contains(n))
            .map(|(n, _)| *n)
            .collect();
        for n in &old {
            log.events.remove(n);
            log.deliveries.retain(|(_, m), _| m != n);
            log.purged_through = log.purged_through.max(*n);
        }
        purged.events = old.len();
        Ok(purged)
    }
}
