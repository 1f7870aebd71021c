//! The webhook outbox: events written with their status change, claimed once and in order, settled,
//! listed, redelivered and purged ([`OutboxStore`]). Input requests change a task's status too, so
//! this part needs [`InputStore`] as well.

use serde_json::json;
use std::future::Future;

use super::{completed, failed, input, record};
use crate::model::{InputResponse, Outcome, TaskRecord, TaskStatus};
use crate::store::{
    InputStore, Lookup, OutboxStore, ProgressUpdate, PurgePolicy, TaskChange, TaskRows,
};
use crate::webhook::{
    Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery, DeliveryState, EventSnapshot,
    WebhookEvent, WebhookTarget,
};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows + InputStore + OutboxStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    status_changes_write_webhook_events_in_the_same_step(make().await).await;
    deliveries_are_claimed_once_and_in_order_per_task_and_target(make().await).await;
    a_gone_delivery_stops_the_later_events_of_its_task_and_target(make().await).await;
    deliveries_are_listed_redelivered_and_purged(make().await).await;
    progress_events_go_only_to_targets_that_ask_and_only_when_asked(make().await).await;
    a_stopping_node_lets_go_of_its_deliveries(make().await).await;
    client_registrations_are_counted_per_principal_while_unfinished(make().await).await;
}

async fn progress_events_go_only_to_targets_that_ask_and_only_when_asked(
    s: impl TaskRows + InputStore + OutboxStore,
) {
    let mut t = with_webhooks("p", 1_000);
    t.webhooks[0].events = vec![WebhookEvent::Progress, WebhookEvent::Completed];
    s.create(t, None).await.unwrap();
    let report = |progress: f64, progress_event: bool| TaskChange {
        progress: Some(ProgressUpdate {
            progress,
            total: Some(10.0),
            message: Some(format!("step {progress}")),
        }),
        progress_event,
        ..Default::default()
    };
    // A report the engine did not mark writes no event, a marked one writes one per asking target.
    s.update("p", &TaskStatus::ACTIVE, report(1.0, false), 2_000)
        .await
        .unwrap();
    s.update("p", &TaskStatus::ACTIVE, report(2.0, true), 3_000)
        .await
        .unwrap();
    // A marked change without a report (the end of a pacing interval) shows the task as it is.
    let late = TaskChange {
        progress_event: true,
        ..Default::default()
    };
    s.update("p", &TaskStatus::ACTIVE, late, 3_500)
        .await
        .unwrap();
    s.update("p", &TaskStatus::ACTIVE, completed(), 4_000)
        .await
        .unwrap();
    let events = events_of(&s, "p").await;
    assert_eq!(
        events
            .iter()
            .map(|d| (d.entry.event, d.entry.target, d.entry.created_at))
            .collect::<Vec<_>>(),
        [
            (WebhookEvent::Progress, 0, 3_000),
            (WebhookEvent::Progress, 0, 3_500),
            (WebhookEvent::Completed, 0, 4_000)
        ],
        "the failures-only target gets none"
    );
    let seen: EventSnapshot = serde_json::from_str(&events[0].entry.snapshot).unwrap();
    assert_eq!(
        (
            seen.status,
            seen.progress,
            seen.progress_total,
            seen.progress_message.as_deref()
        ),
        (TaskStatus::Working, Some(2.0), Some(10.0), Some("step 2"))
    );
    // A target that names no events gets no progress: it can be many events per task.
    s.create(with_webhooks("q", 1_000), None).await.unwrap();
    s.update("q", &TaskStatus::ACTIVE, report(5.0, true), 5_000)
        .await
        .unwrap();
    assert!(events_of(&s, "q").await.is_empty());
}

async fn a_stopping_node_lets_go_of_its_deliveries(s: impl TaskRows + InputStore + OutboxStore) {
    for id in ["r1", "r2"] {
        s.create(with_webhooks(id, 1_000), None).await.unwrap();
        s.update(id, &TaskStatus::ACTIVE, completed(), 2_000)
            .await
            .unwrap();
    }
    let claimed = s
        .claim_deliveries("node-a", 3_000, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(
        s.claim_deliveries("node-b", 3_100, 60_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "held by node-a"
    );
    // What node-a settled stays settled; what it still holds goes to whoever claims next.
    assert!(s
        .finish_delivery(
            &claimed[0].entry.id,
            "node-a",
            attempt(3_200, Some(200)),
            DeliveryNext::Delivered
        )
        .await
        .unwrap());
    assert_eq!(s.release_deliveries("node-b").await.unwrap(), 0);
    assert_eq!(s.release_deliveries("node-a").await.unwrap(), 1);
    let taken = s
        .claim_deliveries("node-b", 3_300, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(
        taken.iter().map(|d| &d.entry.id).collect::<Vec<_>>(),
        [&claimed[1].entry.id]
    );
}

async fn client_registrations_are_counted_per_principal_while_unfinished(
    s: impl TaskRows + InputStore + OutboxStore,
) {
    // with_webhooks: a client's target and an operator's subscription.
    for id in ["c1", "c2", "c3"] {
        s.create(with_webhooks(id, 1_000), None).await.unwrap();
    }
    // Only an operator's subscription: not the client's registration.
    let mut ops = with_webhooks("c4", 1_000);
    ops.webhooks.remove(0);
    s.create(ops, None).await.unwrap();
    s.create(record("c5", "alice", 1_000), None).await.unwrap();
    let mut bob = with_webhooks("c6", 1_000);
    bob.owner = "bob".into();
    s.create(bob, None).await.unwrap();
    assert_eq!(s.count_registrations("alice", 100).await.unwrap(), 3);
    assert_eq!(
        s.count_registrations("alice", 2).await.unwrap(),
        2,
        "counted up to the cap"
    );
    assert_eq!(s.count_registrations("bob", 100).await.unwrap(), 1);
    assert_eq!(s.count_registrations("carol", 100).await.unwrap(), 0);
    // A finished task's registration no longer counts.
    s.update("c1", &TaskStatus::ACTIVE, completed(), 2_000)
        .await
        .unwrap();
    assert_eq!(s.count_registrations("alice", 100).await.unwrap(), 2);
}

/// A task with two webhook targets: the first wants every event, the second only failures.
fn with_webhooks(id: &str, created_at: u64) -> TaskRecord {
    let mut t = record(id, "alice", created_at);
    t.webhooks = vec![
        WebhookTarget {
            url: "https://a.example/hook".into(),
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            events: vec![],
            subscription: None,
        },
        WebhookTarget {
            url: "https://ops.example/failures".into(),
            secret: "whsec_b3Bz".into(),
            events: vec![WebhookEvent::Failed],
            subscription: Some("failures".into()),
        },
    ];
    t
}

/// The events written for `task`, oldest first.
async fn events_of(s: &(impl TaskRows + InputStore + OutboxStore), task: &str) -> Vec<Delivery> {
    let mut all = s
        .deliveries(&DeliveryQuery {
            task_id: Some(task.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    all.reverse();
    all
}

fn attempt(at: u64, status: Option<u16>) -> DeliveryAttempt {
    DeliveryAttempt {
        at,
        status,
        latency_ms: 12,
        error: status.is_none().then(|| "connection refused".to_string()),
    }
}

async fn status_changes_write_webhook_events_in_the_same_step(
    s: impl TaskRows + InputStore + OutboxStore,
) {
    s.create(with_webhooks("w", 1_000), None).await.unwrap();
    let Lookup::Found(read) = s.get("w").await.unwrap() else {
        panic!("the task is stored")
    };
    assert_eq!(
        read.webhooks,
        with_webhooks("w", 1_000).webhooks,
        "targets and secrets kept"
    );
    assert!(
        events_of(&s, "w").await.is_empty(),
        "a create makes no event"
    );
    s.add_input(input("q", "w", 2_000), 2_000).await.unwrap();
    s.answer_input(
        "q",
        InputResponse::Result {
            value: json!({"action": "accept"}),
        },
        3_000,
    )
    .await
    .unwrap();
    // A noted change keeps the status: no event.
    let note = TaskChange {
        status_message: Some(Some("resumed".into())),
        noted: true,
        ..Default::default()
    };
    s.update("w", &TaskStatus::ACTIVE, note, 3_500)
        .await
        .unwrap();
    let mut done = completed();
    done.outcome = Some(Outcome::Result {
        value: json!({"answer": 42}),
        is_error: false,
    });
    s.update("w", &TaskStatus::ACTIVE, done, 4_000)
        .await
        .unwrap();
    let events = events_of(&s, "w").await;
    assert_eq!(
        events
            .iter()
            .map(|d| (d.entry.event, d.entry.target, d.entry.created_at, d.state))
            .collect::<Vec<_>>(),
        [
            (
                WebhookEvent::InputRequired,
                0,
                2_000,
                DeliveryState::Pending
            ),
            (WebhookEvent::Completed, 0, 4_000, DeliveryState::Pending),
        ],
        "the failures-only target gets neither"
    );
    let done = &events[1];
    assert_eq!(done.entry.url, "https://a.example/hook");
    assert_eq!(done.entry.secret, "", "a listing leaves the secret out");
    assert!(done.entry.id.starts_with("msg_") && done.entry.id != events[0].entry.id);
    assert_eq!((done.attempts, done.next_at), (0, 4_000));
    let seen: EventSnapshot = serde_json::from_str(&done.entry.snapshot).unwrap();
    assert_eq!(
        (seen.task_id.as_str(), seen.status),
        ("w", TaskStatus::Completed)
    );
    assert_eq!(
        (seen.updated_at, seen.status_message),
        (4_000, Some("resumed".into()))
    );
    assert_eq!(
        seen.outcome,
        Some(Outcome::Result {
            value: json!({"answer": 42}),
            is_error: false
        })
    );
    let asked: EventSnapshot = serde_json::from_str(&events[0].entry.snapshot).unwrap();
    assert_eq!(
        (asked.status, asked.outcome),
        (TaskStatus::InputRequired, None)
    );
    // A failure reaches both targets; the operator's carries its subscription's name.
    s.create(with_webhooks("x", 1_000), None).await.unwrap();
    s.update("x", &TaskStatus::ACTIVE, failed("boom"), 5_000)
        .await
        .unwrap();
    let events = events_of(&s, "x").await;
    assert_eq!(
        events
            .iter()
            .map(|d| (d.entry.target, d.entry.subscription.as_deref()))
            .collect::<Vec<_>>(),
        [(0, None), (1, Some("failures"))]
    );
    let seen: EventSnapshot = serde_json::from_str(&events[1].entry.snapshot).unwrap();
    assert_eq!(events[1].entry.event, WebhookEvent::Failed);
    assert!(matches!(seen.outcome, Some(Outcome::Error { message, .. }) if message == "boom"));
    // A result that reports a tool error is a failure, for both targets.
    s.create(with_webhooks("e", 1_000), None).await.unwrap();
    let mut tool_error = completed();
    tool_error.outcome = Some(Outcome::Result {
        value: json!({"broken": true}),
        is_error: true,
    });
    s.update("e", &TaskStatus::ACTIVE, tool_error, 5_500)
        .await
        .unwrap();
    assert_eq!(
        events_of(&s, "e")
            .await
            .iter()
            .map(|d| d.entry.event)
            .collect::<Vec<_>>(),
        [WebhookEvent::Failed, WebhookEvent::Failed]
    );
    // A task without targets writes nothing.
    s.create(record("plain", "alice", 1_000), None)
        .await
        .unwrap();
    s.update("plain", &TaskStatus::ACTIVE, completed(), 6_000)
        .await
        .unwrap();
    assert!(events_of(&s, "plain").await.is_empty());
}

async fn deliveries_are_claimed_once_and_in_order_per_task_and_target(
    s: impl TaskRows + InputStore + OutboxStore,
) {
    s.create(with_webhooks("w", 1_000), None).await.unwrap();
    s.add_input(input("q", "w", 2_000), 2_000).await.unwrap();
    s.update("w", &TaskStatus::ACTIVE, completed(), 3_000)
        .await
        .unwrap();
    let events = events_of(&s, "w").await;
    let (first, second) = (events[0].entry.id.clone(), events[1].entry.id.clone());
    // Only the oldest pending event of a task and target may go.
    let claimed = s
        .claim_deliveries("node-a", 5_000, 35_000, 10)
        .await
        .unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|d| d.entry.id.as_str())
            .collect::<Vec<_>>(),
        [first.as_str()]
    );
    assert_eq!(
        claimed[0].entry.secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "a claim comes with its target's secret"
    );
    assert!(
        s.claim_deliveries("node-b", 5_000, 35_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "claimed by another node until its lease ends"
    );
    assert!(
        !s.finish_delivery(
            &first,
            "node-b",
            attempt(5_100, Some(200)),
            DeliveryNext::Delivered
        )
        .await
        .unwrap(),
        "only the holder settles it"
    );
    // A failed attempt: due again later, unleased.
    assert!(s
        .finish_delivery(
            &first,
            "node-a",
            attempt(5_100, None),
            DeliveryNext::RetryAt(6_000)
        )
        .await
        .unwrap());
    assert!(s
        .claim_deliveries("node-b", 5_500, 35_000, 10)
        .await
        .unwrap()
        .is_empty());
    let again = s
        .claim_deliveries("node-b", 6_000, 7_000, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].attempts, again[0].last_status), (1, None));
    assert_eq!(again[0].last_error.as_deref(), Some("connection refused"));
    // node-b's lease runs out at 7,000: node-a takes it over.
    let taken = s
        .claim_deliveries("node-a", 7_000, 40_000, 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    assert!(!s
        .finish_delivery(
            &first,
            "node-b",
            attempt(7_100, Some(200)),
            DeliveryNext::Delivered
        )
        .await
        .unwrap());
    assert!(s
        .finish_delivery(
            &first,
            "node-a",
            attempt(7_100, Some(204)),
            DeliveryNext::Delivered
        )
        .await
        .unwrap());
    // Now the next one goes.
    let next = s
        .claim_deliveries("node-b", 7_200, 40_000, 10)
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|d| d.entry.id.clone()).collect::<Vec<_>>(),
        [second]
    );
    let events = events_of(&s, "w").await;
    assert_eq!(events[0].state, DeliveryState::Delivered);
    assert_eq!(events[0].delivered_at, Some(7_100));
    assert_eq!((events[0].attempts, events[0].last_status), (2, Some(204)));
    assert_eq!(
        s.delivery_attempts(&first)
            .await
            .unwrap()
            .iter()
            .map(|a| (a.at, a.status))
            .collect::<Vec<_>>(),
        [(5_100, None), (7_100, Some(204))],
        "the attempts of a holder that lost its lease are not kept"
    );
    // A limit bounds a claim, oldest due first.
    s.create(with_webhooks("y", 1_000), None).await.unwrap();
    s.update("y", &TaskStatus::ACTIVE, failed("no"), 1_500)
        .await
        .unwrap();
    let two = s
        .claim_deliveries("node-c", 8_000, 40_000, 1)
        .await
        .unwrap();
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].entry.task_id, "y");
}

async fn a_gone_delivery_stops_the_later_events_of_its_task_and_target(
    s: impl TaskRows + InputStore + OutboxStore,
) {
    s.create(with_webhooks("w", 1_000), None).await.unwrap();
    s.add_input(input("q", "w", 2_000), 2_000).await.unwrap();
    let answer = InputResponse::Result {
        value: json!({"action": "accept"}),
    };
    s.answer_input("q", answer, 2_500).await.unwrap();
    s.add_input(input("q2", "w", 2_600), 2_600).await.unwrap();
    let claimed = s
        .claim_deliveries("node-a", 5_000, 35_000, 10)
        .await
        .unwrap();
    // Target 0's first event (target 1 wants failures only, and none happened yet).
    assert_eq!(claimed.len(), 1);
    assert!(s
        .finish_delivery(
            &claimed[0].entry.id,
            "node-a",
            attempt(5_100, Some(410)),
            DeliveryNext::Gone
        )
        .await
        .unwrap());
    // Events written after the 410 are settled as gone, for that target only.
    s.update("w", &TaskStatus::ACTIVE, failed("x"), 6_000)
        .await
        .unwrap();
    let states: Vec<_> = events_of(&s, "w")
        .await
        .iter()
        .map(|d| (d.entry.target, d.entry.event, d.state))
        .collect();
    assert_eq!(
        states,
        [
            (0, WebhookEvent::InputRequired, DeliveryState::Gone),
            (0, WebhookEvent::InputRequired, DeliveryState::Gone),
            (0, WebhookEvent::Failed, DeliveryState::Gone),
            (1, WebhookEvent::Failed, DeliveryState::Pending),
        ]
    );
}

async fn deliveries_are_listed_redelivered_and_purged(s: impl TaskRows + InputStore + OutboxStore) {
    s.create(with_webhooks("w", 1_000), None).await.unwrap();
    s.update("w", &TaskStatus::ACTIVE, completed(), 2_000)
        .await
        .unwrap();
    s.create(with_webhooks("v", 1_000), None).await.unwrap();
    s.update("v", &TaskStatus::ACTIVE, completed(), 2_500)
        .await
        .unwrap();
    let w = events_of(&s, "w").await[0].entry.id.clone();
    s.claim_deliveries("node-a", 3_000, 30_000, 10)
        .await
        .unwrap();
    s.finish_delivery(
        &w,
        "node-a",
        attempt(3_100, Some(200)),
        DeliveryNext::Delivered,
    )
    .await
    .unwrap();
    let all = s.deliveries(&DeliveryQuery::default()).await.unwrap();
    assert_eq!(
        all.iter()
            .map(|d| d.entry.task_id.as_str())
            .collect::<Vec<_>>(),
        ["v", "w"],
        "newest first"
    );
    let delivered = s
        .deliveries(&DeliveryQuery {
            state: Some(DeliveryState::Delivered),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].entry.id, w);
    // Events outlive their task: a purged task's are still delivered and listed.
    let purge = PurgePolicy {
        now: 1 << 40,
        finished_grace_ms: 0,
        tombstone_ms: 0,
        finished_before: None,
    };
    s.purge(purge).await.unwrap();
    assert_eq!(
        s.deliveries(&DeliveryQuery::default()).await.unwrap().len(),
        2
    );
    // Redelivered: pending and due now, even after it was delivered.
    assert!(s.redeliver(&w, 9_000).await.unwrap());
    assert!(!s.redeliver("msg_nope", 9_000).await.unwrap());
    let again = s
        .claim_deliveries("node-b", 9_000, 30_000, 10)
        .await
        .unwrap();
    assert!(again.iter().any(|d| d.entry.id == w));
    assert!(
        again
            .iter()
            .all(|d| d.entry.secret == "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        "an event outliving its task is claimed with its target's secret"
    );
    for d in &again {
        s.finish_delivery(
            &d.entry.id,
            "node-b",
            attempt(9_100, Some(200)),
            DeliveryNext::Delivered,
        )
        .await
        .unwrap();
    }
    assert_eq!(s.delivery_attempts(&w).await.unwrap().len(), 2);
    // Settled deliveries written before the cut go, with their attempts; pending ones stay.
    s.create(with_webhooks("p", 1_000), None).await.unwrap();
    s.update("p", &TaskStatus::ACTIVE, completed(), 2_200)
        .await
        .unwrap();
    assert_eq!(
        s.purge_deliveries(2_400).await.unwrap(),
        1,
        "w's, written at 2,000"
    );
    let left: Vec<_> = s
        .deliveries(&DeliveryQuery::default())
        .await
        .unwrap()
        .iter()
        .map(|d| d.entry.task_id.clone())
        .collect();
    assert_eq!(left, ["p", "v"]);
    assert!(s.delivery_attempts(&w).await.unwrap().is_empty());
}
