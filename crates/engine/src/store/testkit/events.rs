//! Events for subscribers ([`EventStore`]): the log in commit order with its cursors, task events
//! written with their change, fan-out to matching subscriptions in the same step, claims and
//! settles of deliveries, subscriptions' refresh and cap, verifications, the purge.

use serde_json::{json, Map, Value};
use std::future::Future;

use super::{completed, record};
use crate::events::{
    EventDelivery, EventPosition, EventQuery, EventSubscription, NewEvent, SubscriptionPut,
    SubscriptionStart, TASK_FINISHED, TASK_INPUT_REQUIRED,
};
use crate::model::TaskStatus;
use crate::store::{EventStore, StoreError, TaskChange, TaskRows};
use crate::webhook::{DeliveryAttempt, DeliveryNext, DeliveryState};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows + EventStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    the_log_is_read_in_order_from_a_cursor_by_type_reader_and_filter(make().await).await;
    status_changes_write_task_events_in_the_same_step(make().await).await;
    events_fan_out_to_the_live_subscriptions_they_match(make().await).await;
    deliveries_are_claimed_once_and_settled_by_their_holder(make().await).await;
    subscriptions_refresh_in_place_and_are_capped_per_principal(make().await).await;
    verifications_are_kept_per_principal_and_url(make().await).await;
    the_purge_keeps_what_pending_deliveries_need_and_reports_truncation(make().await).await;
    a_subscription_from_a_cursor_replays_the_log_after_it(make().await).await;
    filters_compare_kinds_and_numbers_by_value(make().await).await;
    gaps_keep_their_latest_position_until_told(make().await).await;
}

async fn gaps_keep_their_latest_position_until_told(s: impl TaskRows + EventStore) {
    for id in ["sub_g", "sub_h"] {
        s.put_subscription(
            &subscription(id, "alice", "gapped", 1_000),
            SubscriptionStart::Now,
            10,
        )
        .await
        .unwrap();
    }
    let mut events = Vec::new();
    for _ in 0..3 {
        let e = tool_event("gapped", None, 1_000, json!({}));
        let id = e.id.clone();
        events.push((id, s.append_event(e).await.unwrap()));
    }
    assert_eq!(claim_due(&s, "node-a", 1_000, 600_000).await.len(), 6);
    let (e1, e2, e3) = (&events[0], &events[1], &events[2]);
    let give_up = |sub: &'static str, e: &str, node: &'static str, at: u64, keep: bool| {
        let e = e.to_string();
        let s = &s;
        async move {
            s.finish_event_delivery(
                sub,
                &e,
                node,
                &attempt(at, 413),
                DeliveryNext::GiveUp,
                Some("http_4xx"),
                keep,
            )
            .await
            .unwrap()
        }
    };
    // Kept only by the delivery's holder, and only when asked.
    assert!(!give_up("sub_g", &e1.0, "node-b", 1_100, true).await);
    assert!(give_up("sub_g", &e1.0, "node-a", 1_100, false).await);
    assert_eq!(s.due_event_gaps(u64::MAX / 2, 10).await.unwrap(), vec![]);
    // g missed e3 (e2 delivered): the cursor is e3. h missed e1, e3 delivered: the cursor is
    // e3, never behind what the receiver was given.
    assert!(give_up("sub_g", &e3.0, "node-a", 1_200, true).await);
    for (sub, e) in [("sub_g", &e2.0), ("sub_h", &e3.0)] {
        assert!(s
            .finish_event_delivery(
                sub,
                e,
                "node-a",
                &attempt(1_250, 204),
                DeliveryNext::Delivered,
                None,
                true
            )
            .await
            .unwrap());
    }
    assert!(give_up("sub_h", &e1.0, "node-a", 1_300, true).await);
    assert_eq!(
        s.due_event_gaps(1_199, 10).await.unwrap(),
        vec![],
        "due from the give-up on"
    );
    let due = s.due_event_gaps(2_000, 10).await.unwrap();
    let seen: Vec<_> = due
        .iter()
        .map(|g| (g.subscription.id.as_str(), g.missed, g.cursor, g.attempts))
        .collect();
    assert_eq!(
        seen,
        vec![("sub_g", e3.1, e3.1, 0), ("sub_h", e1.1, e3.1, 0)],
        "soonest due first"
    );
    assert_eq!(due[0].subscription.url, "https://hooks.example.com/sub_g");
    assert_eq!(
        s.due_event_gaps(2_000, 1).await.unwrap().len(),
        1,
        "at most the limit"
    );
    // Claimed: one claim wins, and the gap waits for its retry time behind the others.
    assert!(s.claim_event_gap("sub_g", 2_000, 10_000).await.unwrap());
    assert!(!s.claim_event_gap("sub_g", 2_000, 10_000).await.unwrap());
    let ids = |gaps: Vec<crate::events::EventGap>| -> Vec<String> {
        gaps.into_iter().map(|g| g.subscription.id).collect()
    };
    assert_eq!(
        ids(s.due_event_gaps(9_999, 10).await.unwrap()),
        vec!["sub_h"]
    );
    // A gap noted while one is being told moves it on and keeps its schedule.
    let e4 = tool_event("gapped", None, 3_000, json!({}));
    let e4 = (e4.id.clone(), s.append_event(e4).await.unwrap());
    assert_eq!(claim_due(&s, "node-c", 3_000, 600_000).await.len(), 2);
    assert!(give_up("sub_g", &e4.0, "node-c", 3_100, true).await);
    let due = s.due_event_gaps(10_000, 10).await.unwrap();
    assert_eq!(due[0].subscription.id, "sub_h");
    assert_eq!((due[1].missed, due[1].attempts), (e4.1, 1), "{due:?}");
    // Told the older one: the newer stays.
    assert!(!s.forget_event_gap("sub_g", e3.1).await.unwrap());
    assert!(s.forget_event_gap("sub_g", e4.1).await.unwrap());
    assert!(!s.forget_event_gap("sub_g", e4.1).await.unwrap());
    assert_eq!(
        ids(s.due_event_gaps(10_000, 10).await.unwrap()),
        vec!["sub_h"]
    );
    // A refresh from a cursor replays (and re-arms) what was missed after it: the gap is told.
    let mut h = subscription("sub_h", "alice", "gapped", 11_000);
    h.created_at = 1_000;
    s.put_subscription(&h, SubscriptionStart::After(EventPosition::START), 10)
        .await
        .unwrap();
    assert_eq!(s.due_event_gaps(20_000, 10).await.unwrap(), vec![]);
    // A subscription past its end has no gap due; a removed one's gap goes with it, and a
    // subscription made again with its id does not inherit it.
    assert_eq!(claim_due(&s, "node-d", 11_000, 600_000).await.len(), 1);
    assert!(give_up("sub_h", &e1.0, "node-d", 11_100, true).await);
    assert_eq!(
        ids(s.due_event_gaps(20_000, 10).await.unwrap()),
        vec!["sub_h"]
    );
    assert_eq!(
        s.due_event_gaps(11_000 + 3_600_000, 10).await.unwrap(),
        vec![],
        "ended"
    );
    assert!(s.delete_subscription("sub_h").await.unwrap());
    s.put_subscription(
        &subscription("sub_h", "alice", "gapped", 12_000),
        SubscriptionStart::Now,
        10,
    )
    .await
    .unwrap();
    assert_eq!(
        s.due_event_gaps(20_000, 10).await.unwrap(),
        vec![],
        "not the old one's gap"
    );
}

async fn filters_compare_kinds_and_numbers_by_value(s: impl TaskRows + EventStore) {
    let cases = [
        ("ok-true", json!({"ok": true})),
        ("ok-false", json!({"ok": false})),
        ("n-2", json!({"n": 2})),
        ("word", json!({"w": "1"})),
    ];
    for (id, filter) in &cases {
        let mut sub = subscription(id, "alice", "m", 1_000);
        sub.filter = filter.as_object().cloned().unwrap();
        s.put_subscription(&sub, SubscriptionStart::Now, 100)
            .await
            .unwrap();
    }
    for fields in [
        json!({"ok": 1}),
        json!({"ok": true}),
        json!({"ok": 0}),
        json!({"n": 2.0}),
        json!({"n": "2"}),
        json!({"w": 1}),
        json!({"w": "1"}),
    ] {
        s.append_event(tool_event("m", None, 1_100, fields))
            .await
            .unwrap();
    }
    let mut got: Vec<(String, Value)> = claim_due(&s, "n", 1_100, 60_000)
        .await
        .into_iter()
        .map(|d| (d.subscription.id, Value::Object(d.event.event.fields)))
        .collect();
    got.sort_by_key(|(id, v)| (id.clone(), v.to_string()));
    assert_eq!(
        got,
        [
            ("n-2".to_string(), json!({"n": 2.0})),
            ("ok-true".into(), json!({"ok": true})),
            ("word".into(), json!({"w": "1"})),
        ],
        "true is not 1, false is not 0, 2 is 2.0, \"1\" is not 1"
    );
}

async fn a_subscription_from_a_cursor_replays_the_log_after_it(s: impl TaskRows + EventStore) {
    let first = s
        .append_event(tool_event("ping", None, 1_000, json!({"n": 1})))
        .await
        .unwrap();
    s.append_event(tool_event("ping", Some("bob"), 1_100, json!({"n": 2})))
        .await
        .unwrap();
    s.append_event(tool_event("ping", None, 1_200, json!({"n": 3})))
        .await
        .unwrap();
    let sub = subscription("r", "alice", "ping", 2_000);
    let put = s
        .put_subscription(&sub, SubscriptionStart::After(first), 10)
        .await
        .unwrap();
    assert_eq!(put.put, SubscriptionPut::New);
    assert_eq!(put.from, first);
    assert!(!put.truncated);
    let replayed = claim_due(&s, "n", 2_000, 60_000).await;
    let ns: Vec<Value> = replayed
        .iter()
        .map(|d| d.event.event.fields["n"].clone())
        .collect();
    assert_eq!(ns, [json!(3)], "after the cursor, not Bob's");
    // Given up on, then replayed from a cursor again: sent again.
    let id3 = replayed[0].event.event.id.clone();
    assert!(s
        .finish_event_delivery(
            "r",
            &id3,
            "n",
            &attempt(2_100, 500),
            DeliveryNext::GiveUp,
            Some("http_5xx"),
            false
        )
        .await
        .unwrap());
    assert!(claim_due(&s, "n", 3_000, 60_000).await.is_empty());
    s.put_subscription(&sub, SubscriptionStart::After(first), 10)
        .await
        .unwrap();
    let again = claim_due(&s, "n", 3_000, 60_000).await;
    assert_eq!(again.len(), 1, "the abandoned delivery is pending again");
    assert_eq!(again[0].event.event.id, id3);
    assert_eq!(again[0].attempts, 0);
    // A give-up that says nothing of the endpoint leaves the subscription's status as it was.
    assert!(s
        .finish_event_delivery(
            "r",
            &id3,
            "n",
            &attempt(3_100, 0),
            DeliveryNext::GiveUp,
            None,
            false
        )
        .await
        .unwrap());
    let status = s.get_subscription("r").await.unwrap().unwrap();
    assert_eq!(status.last_error.as_deref(), Some("http_5xx"));
    assert_eq!(status.last_delivery_at, None);
    assert_eq!(s.get_subscription("r").await.unwrap().unwrap().from, first);
    // A refresh that keeps its start moves nothing and replays nothing again; one from now
    // starts at the end of the log.
    let kept = s
        .put_subscription(&sub, SubscriptionStart::Kept, 10)
        .await
        .unwrap();
    assert_eq!((kept.put, kept.from), (SubscriptionPut::Refreshed, first));
    let now = s
        .put_subscription(&sub, SubscriptionStart::Now, 10)
        .await
        .unwrap();
    assert!(now.from > first);
    let fresh = subscription("fresh", "alice", "ping", 2_000);
    let kept_new = s
        .put_subscription(&fresh, SubscriptionStart::Kept, 10)
        .await
        .unwrap();
    assert!(kept_new.from >= now.from, "a new one kept starts now");
}

/// A tool event of type `name` at `at` with payload fields `fields` (also its data).
pub fn tool_event(name: &str, owner: Option<&str>, at: u64, fields: Value) -> NewEvent {
    let mut e = NewEvent::new(name, &fields);
    e.owner = owner.map(str::to_string);
    e.fields = fields.as_object().cloned().unwrap_or_default();
    e.created_at = at;
    e
}

/// A subscription of `principal` to `name`, made at `at`, from `from`, for an hour.
pub fn subscription(id: &str, principal: &str, name: &str, at: u64) -> EventSubscription {
    EventSubscription {
        id: id.into(),
        principal: principal.into(),
        name: name.into(),
        arguments: "{}".into(),
        task_id: None,
        tool: None,
        filter: Map::new(),
        url: format!("https://hooks.example.com/{id}"),
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        previous_secret: None,
        previous_until: None,
        created_at: at,
        refreshed_at: at,
        expires_at: Some(at + 3_600_000),
        from: EventPosition::START,
        last_delivery_at: None,
        last_error: None,
        failed_since: None,
    }
}

fn query(name: &str, principal: &str, after: EventPosition) -> EventQuery {
    EventQuery {
        name: name.into(),
        principal: principal.into(),
        session: None,
        task_id: None,
        tool: None,
        filter: Map::new(),
        after,
        limit: 100,
    }
}

/// The deliveries due for `node` at `now`, claimed until `lease_until` (fanned out first, for a
/// store that does that apart from the write).
async fn claim_due(
    s: &impl EventStore,
    node: &str,
    now: u64,
    lease_until: u64,
) -> Vec<EventDelivery> {
    settle(s).await;
    s.claim_event_deliveries(node, now, lease_until, 100)
        .await
        .unwrap()
}

/// Waits until every event written so far is visible to readers and fanned out. A store that
/// orders events by transaction (PostgreSQL) shows one only once every transaction that began
/// before it ended, and other tests share the database: a marker written now is visible once
/// every earlier event is.
async fn settle(s: &impl EventStore) {
    let marker = s
        .append_event(tool_event(
            "testkit.marker",
            None,
            crate::clock::now_ms(),
            json!({}),
        ))
        .await
        .unwrap();
    let mut q = query("testkit.marker", "anyone", EventPosition::START);
    q.limit = 1_000;
    for _ in 0..600 {
        let page = s.read_events(&q).await.unwrap();
        if page.events.iter().any(|e| e.position == marker) {
            while s.fan_out_events(1_000).await.unwrap() > 0 {}
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("an event written 30 s ago is still not visible");
}

fn attempt(at: u64, status: u16) -> DeliveryAttempt {
    DeliveryAttempt {
        at,
        status: Some(status),
        latency_ms: 3,
        error: None,
    }
}

async fn the_log_is_read_in_order_from_a_cursor_by_type_reader_and_filter(
    s: impl TaskRows + EventStore,
) {
    let empty = s.event_horizon().await.unwrap();
    let mut positions = Vec::new();
    for (i, (owner, branch)) in [
        (Some("alice"), "main"),
        (Some("bob"), "main"),
        (None, "dev"),
        (Some("alice"), "dev"),
        (None, "main"),
    ]
    .into_iter()
    .enumerate()
    {
        let e = tool_event(
            "build.finished",
            owner,
            1_000 + i as u64,
            json!({"branch": branch}),
        );
        positions.push(s.append_event(e).await.unwrap());
    }
    s.append_event(tool_event("other", None, 2_000, json!({})))
        .await
        .unwrap();
    settle(&s).await;
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    assert!(
        positions[0] > empty,
        "every event is after the horizon it was written past"
    );
    let horizon = s.event_horizon().await.unwrap();
    assert!(horizon > positions[4]);

    // Alice sees her own and everyone's, not Bob's, in order.
    let page = s
        .read_events(&query("build.finished", "alice", EventPosition::START))
        .await
        .unwrap();
    let seen: Vec<Value> = page
        .events
        .iter()
        .map(|e| serde_json::from_str(&e.event.data).unwrap())
        .collect();
    assert_eq!(
        seen,
        [
            json!({"branch": "main"}),
            json!({"branch": "dev"}),
            json!({"branch": "dev"}),
            json!({"branch": "main"})
        ]
    );
    assert!(!page.more && !page.truncated);
    assert!(
        page.next >= horizon,
        "a read that saw the end goes on from it"
    );
    let ids: Vec<&str> = page.events.iter().map(|e| e.event.id.as_str()).collect();
    assert!(ids.iter().all(|id| id.starts_with("evt_")));

    // A filter, and pages: the cursor is the last event's position while more follow.
    let mut q = query("build.finished", "alice", EventPosition::START);
    q.filter.insert("branch".into(), json!("dev"));
    q.limit = 1;
    let first = s.read_events(&q).await.unwrap();
    assert_eq!(first.events.len(), 1);
    assert!(first.more);
    assert_eq!(first.next, first.events[0].position);
    q.after = first.next;
    let second = s.read_events(&q).await.unwrap();
    assert_eq!(second.events.len(), 1);
    assert!(second.events[0].position > first.events[0].position);
    q.after = second.next;
    let third = s.read_events(&q).await.unwrap();
    assert!(third.events.is_empty() && !third.more);
    // From the horizon: nothing yet; the next event is after it.
    let now = s
        .read_events(&query("build.finished", "alice", horizon))
        .await
        .unwrap();
    assert!(now.events.is_empty());
    assert!(now.next >= horizon);
    let later = s
        .append_event(tool_event(
            "build.finished",
            None,
            3_000,
            json!({"branch": "x"}),
        ))
        .await
        .unwrap();
    assert!(later > horizon);
    settle(&s).await;
    let page = s
        .read_events(&query("build.finished", "carol", horizon))
        .await
        .unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].position, later);
}

async fn status_changes_write_task_events_in_the_same_step(s: impl TaskRows + EventStore) {
    s.create(record("t1", "alice", 1_000), None).await.unwrap();
    s.create(record("t2", "alice", 1_000), None).await.unwrap();
    let waiting = TaskChange {
        status: Some(TaskStatus::InputRequired),
        ..Default::default()
    };
    s.update("t1", &TaskStatus::ACTIVE, waiting, 1_500)
        .await
        .unwrap();
    // A change that keeps the status makes no event.
    let progress = TaskChange {
        status_message: Some(Some("still".into())),
        ..Default::default()
    };
    s.update("t1", &TaskStatus::ACTIVE, progress, 1_600)
        .await
        .unwrap();
    s.update("t1", &TaskStatus::ACTIVE, completed(), 2_000)
        .await
        .unwrap();
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    s.update("t2", &TaskStatus::ACTIVE, cancel, 2_100)
        .await
        .unwrap();
    settle(&s).await;

    let asked = s
        .read_events(&query(TASK_INPUT_REQUIRED, "alice", EventPosition::START))
        .await
        .unwrap();
    assert_eq!(asked.events.len(), 1);
    let e = &asked.events[0].event;
    assert_eq!(e.task_id.as_deref(), Some("t1"));
    assert_eq!(e.tool.as_deref(), Some("echo"));
    assert_eq!(e.owner.as_deref(), Some("alice"));
    assert_eq!(e.created_at, 1_500);
    let finished = s
        .read_events(&query(TASK_FINISHED, "alice", EventPosition::START))
        .await
        .unwrap();
    let tasks: Vec<_> = finished
        .events
        .iter()
        .map(|e| e.event.task_id.clone().unwrap())
        .collect();
    assert_eq!(tasks, ["t1", "t2"]);
    let snapshot: Value = serde_json::from_str(&finished.events[0].event.data).unwrap();
    assert_eq!(snapshot["status"], "completed");
    // Bob sees none of Alice's tasks' events; a task filter keeps one task's.
    let bob = s
        .read_events(&query(TASK_FINISHED, "bob", EventPosition::START))
        .await
        .unwrap();
    assert!(bob.events.is_empty());
    // A reader told apart by session reads its session's only.
    let mut q = query(TASK_FINISHED, "alice", EventPosition::START);
    q.session = Some("s2".into());
    assert!(s.read_events(&q).await.unwrap().events.is_empty());
    q.session = Some("s1".into());
    assert_eq!(s.read_events(&q).await.unwrap().events.len(), 2);
    assert_eq!(finished.events[0].event.session.as_deref(), Some("s1"));
    let mut q = query(TASK_FINISHED, "alice", EventPosition::START);
    q.task_id = Some("t2".into());
    assert_eq!(s.read_events(&q).await.unwrap().events.len(), 1);
    q.task_id = None;
    q.tool = Some("other".into());
    assert!(s.read_events(&q).await.unwrap().events.is_empty());
}

async fn events_fan_out_to_the_live_subscriptions_they_match(s: impl TaskRows + EventStore) {
    let start = s.event_horizon().await.unwrap();
    let mut all = subscription("all", "alice", TASK_FINISHED, 1_000);
    all.from = start;
    let mut one = subscription("one", "alice", TASK_FINISHED, 1_000);
    one.task_id = Some("t2".into());
    one.from = start;
    let mut bobs = subscription("bobs", "bob", TASK_FINISHED, 1_000);
    bobs.from = start;
    let mut ended = subscription("ended", "alice", TASK_FINISHED, 1_000);
    ended.expires_at = Some(1_500);
    ended.from = start;
    for sub in [&all, &one, &bobs, &ended] {
        assert_eq!(
            s.put_subscription(sub, SubscriptionStart::Now, 10)
                .await
                .unwrap()
                .put,
            SubscriptionPut::New
        );
    }
    s.create(record("t1", "alice", 1_000), None).await.unwrap();
    s.create(record("t2", "alice", 1_000), None).await.unwrap();
    s.update("t1", &TaskStatus::ACTIVE, completed(), 2_000)
        .await
        .unwrap();
    s.update("t2", &TaskStatus::ACTIVE, completed(), 2_000)
        .await
        .unwrap();
    let mut claimed = claim_due(&s, "node-a", 2_000, 60_000).await;
    claimed.sort_by(|a, b| {
        (&a.subscription.id, a.event.position).cmp(&(&b.subscription.id, b.event.position))
    });
    let got: Vec<(String, String)> = claimed
        .iter()
        .map(|d| {
            (
                d.subscription.id.clone(),
                d.event.event.task_id.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("all".to_string(), "t1".to_string()),
            ("all".into(), "t2".into()),
            ("one".into(), "t2".into())
        ],
        "Bob's gets none of Alice's; an ended one gets none"
    );
    assert!(claimed
        .iter()
        .all(|d| d.attempts == 0 && d.created_at == 2_000));
    assert_eq!(claimed[0].subscription.url, all.url);
    assert_eq!(claimed[0].subscription.secret, all.secret);

    // A tool event to everyone fans out to each principal's subscription; a filter is matched.
    let mut builds = subscription("builds", "bob", "build.finished", 1_000);
    builds.filter.insert("branch".into(), json!("main"));
    builds.from = s.event_horizon().await.unwrap();
    s.put_subscription(&builds, SubscriptionStart::Now, 10)
        .await
        .unwrap();
    s.append_event(tool_event(
        "build.finished",
        None,
        2_500,
        json!({"branch": "dev"}),
    ))
    .await
    .unwrap();
    s.append_event(tool_event(
        "build.finished",
        None,
        2_600,
        json!({"branch": "main", "n": 2}),
    ))
    .await
    .unwrap();
    let builds_claimed = claim_due(&s, "node-a", 3_000, 60_000).await;
    let to_builds: Vec<_> = builds_claimed
        .iter()
        .filter(|d| d.subscription.id == "builds")
        .collect();
    assert_eq!(to_builds.len(), 1);
    assert_eq!(to_builds[0].event.event.fields["branch"], "main");
    // An unsubscribed subscription's pending deliveries go with it.
    assert!(s.delete_subscription("all").await.unwrap());
    assert!(!s.delete_subscription("all").await.unwrap());
    assert!(s.event_deliveries("all", 10).await.unwrap().is_empty());
    assert_eq!(s.get_subscription("all").await.unwrap(), None);
}

async fn deliveries_are_claimed_once_and_settled_by_their_holder(s: impl TaskRows + EventStore) {
    let sub = subscription("s1", "alice", "ping", 1_000);
    s.put_subscription(&sub, SubscriptionStart::Now, 10)
        .await
        .unwrap();
    let e = tool_event("ping", None, 1_000, json!({}));
    let event_id = e.id.clone();
    s.append_event(e).await.unwrap();
    let a = claim_due(&s, "node-a", 1_000, 61_000).await;
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].event.event.id, event_id);
    let b = claim_due(&s, "node-b", 1_100, 61_100).await;
    assert!(b.is_empty(), "held by node-a");
    // Only the holder settles; a retry is due later and keeps its attempt count.
    assert!(!s
        .finish_event_delivery(
            "s1",
            &event_id,
            "node-b",
            &attempt(1_200, 503),
            DeliveryNext::RetryAt(5_000),
            Some("http_5xx"),
            false
        )
        .await
        .unwrap());
    assert!(s
        .finish_event_delivery(
            "s1",
            &event_id,
            "node-a",
            &attempt(1_200, 503),
            DeliveryNext::RetryAt(5_000),
            Some("http_5xx"),
            false
        )
        .await
        .unwrap());
    let stored = s.get_subscription("s1").await.unwrap().unwrap();
    assert_eq!(stored.last_error.as_deref(), Some("http_5xx"));
    assert_eq!(stored.failed_since, Some(1_200));
    assert!(claim_due(&s, "node-b", 4_999, 70_000).await.is_empty());
    let again = claim_due(&s, "node-b", 5_000, 70_000).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
    // A stopping node lets go: another claims at once.
    assert_eq!(s.release_event_deliveries("node-b").await.unwrap(), 1);
    let c = claim_due(&s, "node-c", 5_001, 70_000).await;
    assert_eq!(c.len(), 1);
    assert!(s
        .finish_event_delivery(
            "s1",
            &event_id,
            "node-c",
            &attempt(5_100, 204),
            DeliveryNext::Delivered,
            None,
            false
        )
        .await
        .unwrap());
    let stored = s.get_subscription("s1").await.unwrap().unwrap();
    assert_eq!(stored.last_delivery_at, Some(5_100));
    assert_eq!((stored.last_error, stored.failed_since), (None, None));
    assert!(claim_due(&s, "node-c", 9_000, 70_000).await.is_empty());
    let listed = s.event_deliveries("s1", 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, DeliveryState::Delivered);
    assert_eq!(listed[0].attempts, 2);
    assert_eq!(listed[0].event_id, event_id);
    assert_eq!(listed[0].name, "ping");
    assert_eq!(listed[0].last_status, Some(204));
    // 410 settles that delivery as gone and keeps the subscription for the next event.
    let e2 = tool_event("ping", None, 9_000, json!({}));
    let id2 = e2.id.clone();
    s.append_event(e2).await.unwrap();
    claim_due(&s, "node-c", 9_000, 70_000).await;
    assert!(s
        .finish_event_delivery(
            "s1",
            &id2,
            "node-c",
            &attempt(9_100, 410),
            DeliveryNext::Gone,
            Some("http_4xx"),
            false
        )
        .await
        .unwrap());
    assert!(s.get_subscription("s1").await.unwrap().is_some());
    let listed = s.event_deliveries("s1", 10).await.unwrap();
    assert_eq!(listed[0].event_id, id2, "newest first");
    assert_eq!(listed[0].state, DeliveryState::Gone);
    s.append_event(tool_event("ping", None, 9_500, json!({})))
        .await
        .unwrap();
    assert_eq!(claim_due(&s, "node-c", 9_500, 70_000).await.len(), 1);
}

async fn subscriptions_refresh_in_place_and_are_capped_per_principal(
    s: impl TaskRows + EventStore,
) {
    let a = subscription("a", "alice", "ping", 1_000);
    let b = subscription("b", "alice", "ping", 1_000);
    assert_eq!(
        s.put_subscription(&a, SubscriptionStart::Now, 2)
            .await
            .unwrap()
            .put,
        SubscriptionPut::New
    );
    assert_eq!(
        s.put_subscription(&b, SubscriptionStart::Now, 2)
            .await
            .unwrap()
            .put,
        SubscriptionPut::New
    );
    let c = subscription("c", "alice", "ping", 1_000);
    match s.put_subscription(&c, SubscriptionStart::Now, 2).await {
        Err(StoreError::TooManySubscriptions { live: 2, max: 2 }) => {}
        other => panic!("expected the cap, got {other:?}"),
    }
    // Another principal has its own count; an ended subscription counts for nothing.
    assert_eq!(
        s.put_subscription(
            &subscription("d", "bob", "ping", 1_000),
            SubscriptionStart::Now,
            2
        )
        .await
        .unwrap()
        .put,
        SubscriptionPut::New
    );
    let mut late = subscription("c", "alice", "ping", 3_700_000);
    late.refreshed_at = 3_700_000;
    assert_eq!(
        s.put_subscription(&late, SubscriptionStart::Now, 2)
            .await
            .unwrap()
            .put,
        SubscriptionPut::New
    );
    // A refresh replaces what it brings and keeps when it was made and how delivery went.
    s.append_event(tool_event("ping", None, 1_100, json!({})))
        .await
        .unwrap();
    let d = claim_due(&s, "n", 1_100, 60_000).await;
    let to_a = d.iter().find(|d| d.subscription.id == "a").unwrap();
    s.finish_event_delivery(
        "a",
        &to_a.event.event.id,
        "n",
        &attempt(1_200, 500),
        DeliveryNext::RetryAt(9_000),
        Some("http_5xx"),
        false,
    )
    .await
    .unwrap();
    let mut refreshed = subscription("a", "alice", "ping", 2_000);
    refreshed.secret = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldw==".into();
    refreshed.previous_secret = Some(a.secret.clone());
    refreshed.previous_until = Some(2_600);
    refreshed.expires_at = Some(90_000);
    assert_eq!(
        s.put_subscription(&refreshed, SubscriptionStart::Now, 0)
            .await
            .unwrap()
            .put,
        SubscriptionPut::Refreshed,
        "a refresh is never refused"
    );
    let stored = s.get_subscription("a").await.unwrap().unwrap();
    assert_eq!(stored.created_at, 1_000);
    assert_eq!(stored.refreshed_at, 2_000);
    assert_eq!(stored.secret, refreshed.secret);
    assert_eq!(stored.previous_secret, Some(a.secret.clone()));
    assert_eq!(stored.previous_until, Some(2_600));
    assert_eq!(stored.expires_at, Some(90_000));
    assert_eq!(stored.last_error.as_deref(), Some("http_5xx"));
    assert_eq!(stored.failed_since, Some(1_200));
    // The pending delivery is sent with the refreshed secret.
    let due = claim_due(&s, "n", 9_000, 70_000).await;
    let to_a = due.iter().find(|d| d.subscription.id == "a").unwrap();
    assert_eq!(to_a.subscription.secret, refreshed.secret);
    let alices = s.subscriptions(Some("alice"), 10).await.unwrap();
    let ids: Vec<&str> = alices.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(s.subscriptions(None, 10).await.unwrap().len(), 4);
    assert_eq!(s.subscriptions(None, 1).await.unwrap().len(), 1);
}

async fn verifications_are_kept_per_principal_and_url(s: impl TaskRows + EventStore) {
    let url = "https://hooks.example.com/in?x=1";
    assert_eq!(s.verification("alice", url).await.unwrap(), None);
    s.put_verification("alice", url, 5_000).await.unwrap();
    assert_eq!(s.verification("alice", url).await.unwrap(), Some(5_000));
    assert_eq!(s.verification("bob", url).await.unwrap(), None);
    assert_eq!(
        s.verification("alice", "https://hooks.example.com/in")
            .await
            .unwrap(),
        None
    );
    s.put_verification("alice", url, 9_000).await.unwrap();
    assert_eq!(s.verification("alice", url).await.unwrap(), Some(9_000));
    s.purge_events(9_000, 0).await.unwrap();
    assert_eq!(s.verification("alice", url).await.unwrap(), None, "ended");
}

async fn the_purge_keeps_what_pending_deliveries_need_and_reports_truncation(
    s: impl TaskRows + EventStore,
) {
    let sub = subscription("s1", "alice", "ping", 1_000);
    s.put_subscription(&sub, SubscriptionStart::Now, 10)
        .await
        .unwrap();
    let mut ended = subscription("ended", "bob", "ping", 1_000);
    ended.expires_at = Some(1_500);
    s.put_subscription(&ended, SubscriptionStart::Now, 10)
        .await
        .unwrap();
    let first = s
        .append_event(tool_event("ping", None, 1_000, json!({"n": 1})))
        .await
        .unwrap();
    let second = tool_event("ping", None, 1_100, json!({"n": 2}));
    let second_id = second.id.clone();
    s.append_event(second).await.unwrap();
    // The first is delivered; the second still pending.
    let due = claim_due(&s, "n", 1_100, 60_000).await;
    let first_id = due
        .iter()
        .find(|d| d.event.position == first)
        .unwrap()
        .event
        .event
        .id
        .clone();
    s.finish_event_delivery(
        "s1",
        &first_id,
        "n",
        &attempt(1_200, 200),
        DeliveryNext::Delivered,
        None,
        false,
    )
    .await
    .unwrap();

    let purged = s.purge_events(2_000, 1_500).await.unwrap();
    settle(&s).await;
    assert_eq!(purged.events, 1, "the pending delivery keeps its event");
    assert_eq!(purged.subscriptions, 1);
    assert_eq!(
        purged.deliveries, 3,
        "the settled one, and the ended subscription's two"
    );
    assert_eq!(s.get_subscription("ended").await.unwrap(), None);
    let page = s
        .read_events(&query("ping", "alice", EventPosition::START))
        .await
        .unwrap();
    assert!(page.truncated, "an event after the cursor was purged");
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].event.id, second_id);
    let page = s.read_events(&query("ping", "alice", first)).await.unwrap();
    assert!(!page.truncated, "nothing after this cursor was purged");
    // The pending one is still delivered.
    let due = claim_due(&s, "n", 99_000, 160_000).await;
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].event.event.id, second_id);
}
