//! The contract test suite every [`TaskStore`] must pass. Backends call [`run_all`] from their own
//! tests with a factory that makes a fresh, empty store.

use serde_json::json;
use std::future::Future;
use std::sync::Arc;

use super::{
    ActiveCounts, ActiveLimit, Among, AnswerError, Created, FinishedCounts, ListQuery, Lookup,
    OrphanPlan, ProgressUpdate, PurgePolicy, SessionLimit, SessionRecord, StoreError, TaskChange,
    TaskFilter, TaskStore, UpdateError,
};
use crate::model::{InputRecord, InputResponse, Outcome, StepRecord, TaskRecord, TaskStatus};
use crate::webhook::{
    Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery, DeliveryState, EventSnapshot,
    WebhookEvent, WebhookTarget,
};

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

/// Runs every contract test, each on a fresh store from `make`.
pub async fn run_all<S, F, Fut>(make: F)
where
    S: TaskStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    create_then_get_returns_the_same_record(make().await).await;
    several_tasks_are_read_at_once(make().await).await;
    a_task_is_found_by_its_key_for_its_owner_only(make().await).await;
    retention_after_finish_counts_from_the_end(make().await).await;
    idempotency_key_returns_existing_or_conflicts(make().await).await;
    update_is_compare_and_set(make().await).await;
    racing_terminal_updates_have_one_winner(Arc::new(make().await)).await;
    progress_never_decreases(make().await).await;
    a_smaller_progress_is_clamped_and_the_rest_of_the_report_applies(make().await).await;
    the_total_never_decreases(make().await).await;
    the_total_is_raised_to_the_progress(make().await).await;
    a_report_that_changes_only_the_total_is_kept(make().await).await;
    the_progress_message_is_kept_until_the_task_completes(make().await).await;
    list_pages_by_owner_and_session(make().await).await;
    orphans_are_claimed_by_lease(make().await).await;
    orphans_are_changed_by_the_plan_in_one_step(make().await).await;
    an_update_for_a_lease_holder_fails_once_the_lease_moved(make().await).await;
    purge_keeps_running_tasks_and_leaves_tombstones(make().await).await;
    sessions_round_trip_and_expire(make().await).await;
    live_sessions_are_capped_with_the_create(make().await).await;
    input_requests_move_the_task_and_take_one_answer(make().await).await;
    active_limit_is_enforced_with_the_create(make().await).await;
    purge_takes_the_input_requests_of_purged_tasks(make().await).await;
    a_checkpoint_is_kept_until_the_task_finishes(make().await).await;
    unfinished_tasks_are_counted_by_status(make().await).await;
    finished_tasks_since_a_time_are_counted_by_how_they_ended(make().await).await;
    an_operator_searches_every_principals_tasks_and_purges_finished_ones(make().await).await;
    every_status_change_is_kept_until_the_task_is_purged(make().await).await;
    a_noted_change_is_kept_in_the_history_without_a_status_change(make().await).await;
    steps_are_recorded_by_the_lease_holder_once_and_purged_with_the_task(make().await).await;
    status_changes_write_webhook_events_in_the_same_step(make().await).await;
    deliveries_are_claimed_once_and_in_order_per_task_and_target(make().await).await;
    a_gone_delivery_stops_the_later_events_of_its_task_and_target(make().await).await;
    deliveries_are_listed_redelivered_and_purged(make().await).await;
    progress_events_go_only_to_targets_that_ask_and_only_when_asked(make().await).await;
    a_stopping_node_lets_go_of_its_deliveries(make().await).await;
    client_registrations_are_counted_per_principal_while_unfinished(make().await).await;
}

async fn progress_events_go_only_to_targets_that_ask_and_only_when_asked(s: impl TaskStore) {
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

async fn a_stopping_node_lets_go_of_its_deliveries(s: impl TaskStore) {
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

async fn client_registrations_are_counted_per_principal_while_unfinished(s: impl TaskStore) {
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
async fn events_of(s: &impl TaskStore, task: &str) -> Vec<Delivery> {
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

async fn status_changes_write_webhook_events_in_the_same_step(s: impl TaskStore) {
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

async fn deliveries_are_claimed_once_and_in_order_per_task_and_target(s: impl TaskStore) {
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

async fn a_gone_delivery_stops_the_later_events_of_its_task_and_target(s: impl TaskStore) {
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

async fn deliveries_are_listed_redelivered_and_purged(s: impl TaskStore) {
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
        session_idle_ms: 1 << 40,
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

async fn a_noted_change_is_kept_in_the_history_without_a_status_change(s: impl TaskStore) {
    s.create(record("n", "alice", 1_000), None).await.unwrap();
    // A hand-off: the lease is let go, the status stays, the history keeps it.
    let hand_off = TaskChange {
        lease: Some((None, None)),
        status_message: Some(Some("handed off".into())),
        holder: Some("node-a".into()),
        noted: true,
        ..Default::default()
    };
    let rec = s
        .update("n", &TaskStatus::ACTIVE, hand_off, 1_100)
        .await
        .unwrap();
    assert_eq!((rec.lease_owner, rec.lease_until), (None, None));
    // A released task is an orphan at once, whatever the time; the resume is noted too.
    let plan: OrphanPlan = Arc::new(|t: &TaskRecord| {
        Some(TaskChange {
            status_message: Some(Some("resumed".into())),
            attempt: Some(t.attempt + 1),
            noted: true,
            ..Default::default()
        })
    });
    let claimed = s
        .claim_orphans("node-b", 1_200, false, 31_200, plan)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].lease_owner.as_deref(), Some("node-b"));
    assert_eq!(claimed[0].attempt, 2);
    let h = s.history("n").await.unwrap();
    let seen: Vec<(u64, TaskStatus, Option<&str>)> = h
        .iter()
        .map(|t| (t.at, t.status, t.message.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1_100, TaskStatus::Working, Some("handed off")),
            (1_200, TaskStatus::Working, Some("resumed"))
        ]
    );
}

fn step(task: &str, seq: u32, name: &str) -> StepRecord {
    StepRecord {
        task_id: task.into(),
        seq,
        name: name.into(),
        output: json!({"item": seq, "attempt": 1}),
        attempt: 1,
        at: 1_000 + u64::from(seq),
    }
}

async fn steps_are_recorded_by_the_lease_holder_once_and_purged_with_the_task(s: impl TaskStore) {
    s.create(record("j", "alice", 1_000), None).await.unwrap();
    s.create(record("other", "alice", 1_000), None)
        .await
        .unwrap();
    assert!(s.steps("j").await.unwrap().is_empty());
    // Recorded out of order, read in step order.
    s.record_step("node-a", step("j", 1, "second"))
        .await
        .unwrap();
    s.record_step("node-a", step("j", 0, "first"))
        .await
        .unwrap();
    s.record_step("node-a", step("other", 0, "elsewhere"))
        .await
        .unwrap();
    let journal = s.steps("j").await.unwrap();
    assert_eq!(journal, vec![step("j", 0, "first"), step("j", 1, "second")]);
    // The first record of a place stays.
    let mut again = step("j", 1, "changed");
    again.output = json!("different");
    assert!(matches!(
        s.record_step("node-a", again).await,
        Err(UpdateError::Conflict(_))
    ));
    // Only the lease holder records.
    assert!(matches!(
        s.record_step("node-b", step("j", 2, "third")).await,
        Err(UpdateError::Conflict(t)) if t.lease_owner.as_deref() == Some("node-a")
    ));
    assert!(matches!(
        s.record_step("node-a", step("nope", 0, "x")).await,
        Err(UpdateError::NotFound)
    ));
    assert_eq!(s.steps("j").await.unwrap().len(), 2);
    // A finished task records nothing more, and keeps its journal until it is purged.
    s.update("j", &TaskStatus::ACTIVE, completed(), 1_500)
        .await
        .unwrap();
    assert!(matches!(
        s.record_step("node-a", step("j", 2, "third")).await,
        Err(UpdateError::Conflict(t)) if t.status == TaskStatus::Completed
    ));
    assert_eq!(s.steps("j").await.unwrap().len(), 2);
    let purge = PurgePolicy {
        now: 2_000,
        finished_grace_ms: 0,
        tombstone_ms: 1 << 40,
        session_idle_ms: 1 << 40,
        finished_before: Some(2_000),
    };
    assert_eq!(s.purge(purge).await.unwrap().tasks, 1);
    assert!(
        s.steps("j").await.unwrap().is_empty(),
        "purged with the task"
    );
    assert_eq!(s.steps("other").await.unwrap().len(), 1, "only its own");
}

async fn every_status_change_is_kept_until_the_task_is_purged(s: impl TaskStore) {
    s.create(record("h", "alice", 1_000), None).await.unwrap();
    s.add_input(input("h-q", "h", 1_100), 1_100).await.unwrap();
    // Progress alone is no status change.
    let progress = TaskChange {
        progress: Some(ProgressUpdate {
            progress: 1.0,
            total: None,
            message: None,
        }),
        ..Default::default()
    };
    s.update("h", &TaskStatus::ACTIVE, progress, 1_150)
        .await
        .unwrap();
    let answer = InputResponse::Result {
        value: json!({"answer": "yes"}),
    };
    s.answer_input("h-q", answer, 1_200).await.unwrap();
    let fail = failed("it broke");
    s.update("h", &TaskStatus::ACTIVE, fail, 1_300)
        .await
        .unwrap();
    let h = s.history("h").await.unwrap();
    let seen: Vec<(u64, TaskStatus)> = h.iter().map(|t| (t.at, t.status)).collect();
    assert_eq!(
        seen,
        [
            (1_100, TaskStatus::InputRequired),
            (1_200, TaskStatus::Working),
            (1_300, TaskStatus::Failed)
        ]
    );
    assert_eq!(h[2].message.as_deref(), Some("it broke"));
    assert!(s.history("nope").await.unwrap().is_empty());
    let purge = PurgePolicy {
        now: 2_000,
        finished_grace_ms: 0,
        tombstone_ms: 1 << 40,
        session_idle_ms: 1 << 40,
        finished_before: Some(2_000),
    };
    assert_eq!(s.purge(purge).await.unwrap().tasks, 1);
    assert!(
        s.history("h").await.unwrap().is_empty(),
        "purged with the task"
    );
}

async fn an_operator_searches_every_principals_tasks_and_purges_finished_ones(s: impl TaskStore) {
    let mut a = record("a", "alice", 1_000);
    a.tool = "build".into();
    s.create(a, None).await.unwrap();
    s.create(record("b", "bob", 2_000), None).await.unwrap();
    s.create(record("c", "alice", 3_000), None).await.unwrap();
    let done = completed();
    s.update("b", &TaskStatus::ACTIVE, done, 5_000)
        .await
        .unwrap();
    let ids = |found: Vec<TaskRecord>| found.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = TaskFilter {
        limit: 10,
        ..Default::default()
    };
    assert_eq!(
        ids(s.search(&all).await.unwrap()),
        ["c", "b", "a"],
        "newest first"
    );
    let alice = TaskFilter {
        owner: Some("alice".into()),
        ..all.clone()
    };
    assert_eq!(ids(s.search(&alice).await.unwrap()), ["c", "a"]);
    let working_build = TaskFilter {
        statuses: vec![TaskStatus::Working],
        tool: Some("build".into()),
        ..all.clone()
    };
    assert_eq!(ids(s.search(&working_build).await.unwrap()), ["a"]);
    let window = TaskFilter {
        created_after: Some(2_000),
        created_before: Some(3_000),
        ..all.clone()
    };
    assert_eq!(ids(s.search(&window).await.unwrap()), ["b"]);
    let one = TaskFilter {
        limit: 1,
        ..all.clone()
    };
    assert_eq!(ids(s.search(&one).await.unwrap()), ["c"]);
    // Finished before 6 000, whatever its retention: b only (a and c still run).
    let purge = PurgePolicy {
        now: 6_000,
        finished_grace_ms: 0,
        tombstone_ms: 1 << 40,
        session_idle_ms: 1 << 40,
        finished_before: Some(6_000),
    };
    assert_eq!(s.purge(purge).await.unwrap().tasks, 1);
    assert_eq!(ids(s.search(&all).await.unwrap()), ["c", "a"]);
    assert!(matches!(s.get("b").await.unwrap(), Lookup::Expired { .. }));
}

async fn unfinished_tasks_are_counted_by_status(s: impl TaskStore) {
    assert_eq!(s.count_active().await.unwrap(), ActiveCounts::default());
    for id in ["w1", "w2", "asks", "done"] {
        s.create(record(id, "alice", 1_000), None).await.unwrap();
    }
    let ask = TaskChange {
        status: Some(TaskStatus::InputRequired),
        ..Default::default()
    };
    s.update("asks", &TaskStatus::ACTIVE, ask, 1_100)
        .await
        .unwrap();
    let done = completed();
    s.update("done", &TaskStatus::ACTIVE, done, 1_200)
        .await
        .unwrap();
    assert_eq!(
        s.count_active().await.unwrap(),
        ActiveCounts {
            working: 2,
            input_required: 1
        }
    );
}

async fn finished_tasks_since_a_time_are_counted_by_how_they_ended(s: impl TaskStore) {
    // Ids as the engine makes them (creation time first), which stores may use to find the range.
    let day = 1_700_000_000_000u64;
    let hour_ago = day + 10_000_000;
    let tool_error = TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(Outcome::Result {
            value: json!({"bad": true}),
            is_error: true,
        }),
        ..Default::default()
    };
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    let plan: Vec<(u64, Option<TaskChange>)> = vec![
        (hour_ago - 1, Some(completed())),
        (hour_ago - 1, Some(failed("broke"))),
        (hour_ago, Some(completed())),
        (hour_ago + 5, Some(completed())),
        (hour_ago + 6, Some(tool_error)),
        (hour_ago + 7, Some(failed("broke"))),
        (hour_ago + 8, Some(failed("broke"))),
        (hour_ago + 9, Some(cancel)),
        (hour_ago + 10, None),
    ];
    for (at, change) in plan {
        let id = crate::ids::task_id(at);
        s.create(record(&id, "alice", at), None).await.unwrap();
        if let Some(change) = change {
            s.update(&id, &TaskStatus::ACTIVE, change, at + 1)
                .await
                .unwrap();
        }
    }
    assert_eq!(
        s.count_finished(hour_ago).await.unwrap(),
        FinishedCounts {
            completed: 2,
            completed_with_error: 1,
            failed: 2,
            cancelled: 1
        }
    );
    let all = s.count_finished(0).await.unwrap();
    assert_eq!((all.completed, all.failed), (3, 3));
    assert_eq!(
        s.count_finished(hour_ago + 11).await.unwrap(),
        FinishedCounts::default()
    );
}

async fn a_checkpoint_is_kept_until_the_task_finishes(s: impl TaskStore) {
    s.create(record("k", "alice", 1_000), None).await.unwrap();
    let saved = json!({"remote": {"url": "http://127.0.0.1:9/jobs", "job": "u-1"}});
    let change = TaskChange {
        checkpoint: Some(Some(saved.clone())),
        ..Default::default()
    };
    let rec = s
        .update("k", &TaskStatus::ACTIVE, change, 1_100)
        .await
        .unwrap();
    assert_eq!(rec.checkpoint, Some(saved.clone()));
    let Lookup::Found(read) = s.get("k").await.unwrap() else {
        panic!("k is gone")
    };
    assert_eq!(read.checkpoint, Some(saved), "stored, not only returned");
    // Another change leaves it as it is; finishing clears it.
    let progress = TaskChange {
        progress: Some(ProgressUpdate {
            progress: 1.0,
            total: None,
            message: None,
        }),
        ..Default::default()
    };
    let rec = s
        .update("k", &TaskStatus::ACTIVE, progress, 1_200)
        .await
        .unwrap();
    assert!(rec.checkpoint.is_some());
    let done = completed();
    s.update("k", &TaskStatus::ACTIVE, done, 1_300)
        .await
        .unwrap();
    let Lookup::Found(read) = s.get("k").await.unwrap() else {
        panic!("k is gone")
    };
    assert_eq!(read.checkpoint, None);
}

async fn purge_takes_the_input_requests_of_purged_tasks(s: impl TaskStore) {
    let answer = InputResponse::Result {
        value: json!({"answer": "yes"}),
    };
    // g1 asks twice, gets one answer, then ends; g2 keeps running with a question of its own.
    s.create(record("g1", "alice", 1_000), None).await.unwrap();
    s.create(record("g2", "alice", 1_000), None).await.unwrap();
    s.add_input(input("g1-a", "g1", 1_100), 1_100)
        .await
        .unwrap();
    s.add_input(input("g1-b", "g1", 1_200), 1_200)
        .await
        .unwrap();
    s.add_input(input("g2-a", "g2", 1_300), 1_300)
        .await
        .unwrap();
    s.answer_input("g1-a", answer.clone(), 1_400).await.unwrap();
    s.answer_input("g2-a", answer, 1_500).await.unwrap();
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    s.update("g1", &TaskStatus::ACTIVE, cancel, 2_000)
        .await
        .unwrap();
    let policy = PurgePolicy {
        now: 70_000,
        finished_grace_ms: 5_000,
        tombstone_ms: 10_000,
        session_idle_ms: 1 << 40,
        finished_before: None,
    };
    assert_eq!(s.purge(policy).await.unwrap().tasks, 1);
    assert!(matches!(s.get("g1").await.unwrap(), Lookup::Expired { .. }));
    assert_eq!(s.get_input("g1-a").await.unwrap(), None, "answered: gone");
    assert_eq!(s.get_input("g1-b").await.unwrap(), None, "unanswered: gone");
    assert_eq!(s.inputs("g1").await.unwrap(), Vec::<InputRecord>::new());
    let kept = s.inputs("g2").await.unwrap();
    assert_eq!(
        kept.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["g2-a"],
        "a running task's inputs stay"
    );
    assert!(kept[0].response.is_some());
    assert!(s.get_input("g2-a").await.unwrap().is_some());
}

async fn active_limit_is_enforced_with_the_create(s: impl TaskStore) {
    let limit = |max, session: Option<&str>| {
        Some(ActiveLimit {
            max,
            owner: "alice".into(),
            among: session.map_or(Among::All, |s| Among::Session(s.into())),
        })
    };
    s.create(record("a1", "alice", 1), limit(2, None))
        .await
        .unwrap();
    s.create(record("a2", "alice", 2), limit(2, None))
        .await
        .unwrap();
    match s.create(record("a3", "alice", 3), limit(2, None)).await {
        Err(StoreError::TooManyActive { active: 2, max: 2 }) => {}
        other => panic!("expected the limit, got {other:?}"),
    }
    assert_eq!(
        s.get("a3").await.unwrap(),
        Lookup::Missing,
        "nothing stored"
    );
    // Per session: another session of the same owner has its own count.
    let mut other = record("a4", "alice", 4);
    other.session = Some("s2".into());
    s.create(other, limit(2, Some("s2"))).await.unwrap();
    // Finished tasks do not count.
    let done = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    s.update("a1", &TaskStatus::ACTIVE, done, 5).await.unwrap();
    s.create(record("a5", "alice", 5), limit(3, None))
        .await
        .unwrap();
    s.create(
        record("b1", "bob", 6),
        limit(1, None).map(|l| ActiveLimit {
            owner: "bob".into(),
            ..l
        }),
    )
    .await
    .unwrap();
    // Among sessions that share a prefix: "c1-x" and "c1-y" count together, "c10" and "c2-x" not.
    let by_prefix = || {
        Some(ActiveLimit {
            max: 2,
            owner: "carol".into(),
            among: Among::SessionsStartingWith("c1-".into()),
        })
    };
    for (id, session) in [
        ("c1", "c1-x"),
        ("c2", "c10"),
        ("c3", "c2-x"),
        ("c4", "c1-y"),
    ] {
        let mut t = record(id, "carol", 7);
        t.session = Some(session.into());
        s.create(t, by_prefix()).await.unwrap();
    }
    let mut third = record("c5", "carol", 8);
    third.session = Some("c1-z".into());
    match s.create(third, by_prefix()).await {
        Err(StoreError::TooManyActive { active: 2, max: 2 }) => {}
        other => panic!("expected the prefix's limit, got {other:?}"),
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

async fn input_requests_move_the_task_and_take_one_answer(s: impl TaskStore) {
    s.create(record("i1", "alice", 1_000), None).await.unwrap();
    let t = s.add_input(input("q1", "i1", 2_000), 2_000).await.unwrap();
    assert_eq!(t.status, TaskStatus::InputRequired);
    let t = s.add_input(input("q2", "i1", 2_001), 2_001).await.unwrap();
    assert_eq!(t.status, TaskStatus::InputRequired);
    assert!(matches!(
        s.add_input(input("q9", "nope", 1), 1).await,
        Err(UpdateError::NotFound)
    ));
    let yes = InputResponse::Result {
        value: json!({"action": "accept"}),
    };
    let (t, answered) = s.answer_input("q1", yes.clone(), 3_000).await.unwrap();
    assert_eq!(t.status, TaskStatus::InputRequired, "q2 is still pending");
    assert_eq!(answered.response, Some(yes.clone()));
    assert!(matches!(
        s.answer_input("q1", yes.clone(), 3_001).await,
        Err(AnswerError::AlreadyAnswered)
    ));
    assert!(matches!(
        s.answer_input("zz", yes.clone(), 3_001).await,
        Err(AnswerError::Unknown)
    ));
    let (t, _) = s.answer_input("q2", yes.clone(), 3_002).await.unwrap();
    assert_eq!(t.status, TaskStatus::Working, "all answered: back to work");
    let all = s.inputs("i1").await.unwrap();
    assert_eq!(
        all.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["q1", "q2"]
    );
    assert_eq!(
        s.get_input("q2").await.unwrap().unwrap().answered_at,
        Some(3_002)
    );
    // A task that ends takes no more answers, and one waiting past its ttl is reported overdue.
    let mut waiting = record("i2", "alice", 1_000);
    waiting.ttl_ms = Some(500);
    s.create(waiting, None).await.unwrap();
    s.add_input(input("q3", "i2", 1_100), 1_100).await.unwrap();
    let overdue = s.overdue_waiting(1_600).await.unwrap();
    assert_eq!(
        overdue.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["i2"]
    );
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    s.update("i2", &TaskStatus::ACTIVE, cancel, 1_700)
        .await
        .unwrap();
    assert!(matches!(
        s.answer_input("q3", yes, 1_800).await,
        Err(AnswerError::TaskEnded(TaskStatus::Cancelled))
    ));
}

async fn create_then_get_returns_the_same_record(s: impl TaskStore) {
    let t = record("a1", "alice", 1_000);
    assert_eq!(
        s.create(t.clone(), None).await.unwrap(),
        Created::New(t.clone())
    );
    assert_eq!(s.get("a1").await.unwrap(), Lookup::Found(t));
    assert_eq!(s.get("nope").await.unwrap(), Lookup::Missing);
}

async fn several_tasks_are_read_at_once(s: impl TaskStore) {
    let a = record("m1", "alice", 1_000);
    let b = record("m2", "bob", 1_001);
    s.create(a.clone(), None).await.unwrap();
    s.create(b.clone(), None).await.unwrap();
    let mut found = s
        .get_many(&["m2".into(), "gone".into(), "m1".into()])
        .await
        .unwrap();
    found.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(found, vec![a, b]);
    assert!(s.get_many(&[]).await.unwrap().is_empty());
}

async fn idempotency_key_returns_existing_or_conflicts(s: impl TaskStore) {
    let mut t = record("k1", "alice", 1_000);
    t.idempotency_key = Some("key".into());
    s.create(t.clone(), None).await.unwrap();
    let mut retry = record("k2", "alice", 2_000);
    retry.idempotency_key = Some("key".into());
    assert_eq!(
        s.create(retry.clone(), None).await.unwrap(),
        Created::Existing(t.clone())
    );
    retry.fingerprint = "other work".into();
    match s.create(retry.clone(), None).await {
        Err(StoreError::IdempotencyConflict { task_id, .. }) => assert_eq!(task_id, "k1"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let mut bob = record("k3", "bob", 3_000);
    bob.idempotency_key = Some("key".into());
    assert!(
        matches!(s.create(bob, None).await.unwrap(), Created::New(_)),
        "keys are per owner"
    );
    assert_eq!(s.get("k2").await.unwrap(), Lookup::Missing);
}

async fn update_is_compare_and_set(s: impl TaskStore) {
    s.create(record("u1", "alice", 1_000), None).await.unwrap();
    let change = TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(Outcome::Result {
            value: json!({"answer": 42}),
            is_error: false,
        }),
        ..Default::default()
    };
    let done = s
        .update("u1", &TaskStatus::ACTIVE, change, 5_000)
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.updated_at, 5_000);
    assert_eq!(done.finished_at, Some(5_000));
    assert_eq!(done.lease_owner, None);
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    match s
        .update("u1", &TaskStatus::ACTIVE, cancel.clone(), 6_000)
        .await
    {
        Err(UpdateError::Conflict(cur)) => assert_eq!(cur.status, TaskStatus::Completed),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        s.update("zz", &TaskStatus::ACTIVE, cancel, 6_000).await,
        Err(UpdateError::NotFound)
    ));
    match s.get("u1").await.unwrap() {
        Lookup::Found(t) => assert_eq!(t, done, "a rejected update changes nothing"),
        other => panic!("{other:?}"),
    }
}

async fn racing_terminal_updates_have_one_winner<S: TaskStore>(s: Arc<S>) {
    for i in 0..20 {
        let id = format!("race{i}");
        s.create(record(&id, "alice", 1_000 + i), None)
            .await
            .unwrap();
        let mut handles = Vec::new();
        for status in [
            TaskStatus::Completed,
            TaskStatus::Cancelled,
            TaskStatus::Failed,
        ] {
            let s = s.clone();
            let id = id.clone();
            handles.push(tokio::spawn(async move {
                let change = TaskChange {
                    status: Some(status),
                    ..Default::default()
                };
                s.update(&id, &TaskStatus::ACTIVE, change, 2_000)
                    .await
                    .map(|t| t.status)
            }));
        }
        let mut winners = Vec::new();
        let mut losers_saw = Vec::new();
        for h in handles {
            match h.await.unwrap() {
                Ok(st) => winners.push(st),
                Err(UpdateError::Conflict(cur)) => losers_saw.push(cur.status),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one terminal transition wins");
        assert!(
            losers_saw.iter().all(|st| *st == winners[0]),
            "losers are told the winner"
        );
    }
}

/// A change holding only a progress report.
fn report(progress: f64, total: Option<f64>, message: Option<&str>) -> TaskChange {
    TaskChange {
        progress: Some(ProgressUpdate {
            progress,
            total,
            message: message.map(String::from),
        }),
        ..Default::default()
    }
}

/// Applies `change` to running task `id` and returns (progress, total, message) as stored.
async fn shown(
    s: &impl TaskStore,
    id: &str,
    change: TaskChange,
    at: u64,
) -> (Option<f64>, Option<f64>, Option<String>) {
    let t = s.update(id, &TaskStatus::ACTIVE, change, at).await.unwrap();
    let Lookup::Found(stored) = s.get(id).await.unwrap() else {
        panic!("task {id} vanished")
    };
    assert_eq!(stored, t, "what update returns is what is stored");
    (t.progress, t.progress_total, t.progress_message)
}

async fn a_smaller_progress_is_clamped_and_the_rest_of_the_report_applies(s: impl TaskStore) {
    s.create(record("pc", "alice", 1_000), None).await.unwrap();
    shown(&s, "pc", report(5.0, Some(10.0), None), 2_000).await;
    assert_eq!(
        shown(&s, "pc", report(3.0, Some(20.0), Some("later")), 3_000).await,
        (Some(5.0), Some(20.0), Some("later".into()))
    );
    // Non-finite numbers change nothing.
    assert_eq!(
        shown(&s, "pc", report(f64::NAN, Some(30.0), Some("x")), 4_000).await,
        (Some(5.0), Some(20.0), Some("later".into()))
    );
    assert_eq!(
        shown(&s, "pc", report(6.0, Some(f64::INFINITY), None), 5_000).await,
        (Some(5.0), Some(20.0), Some("later".into()))
    );
}

async fn the_total_never_decreases(s: impl TaskStore) {
    s.create(record("pt", "alice", 1_000), None).await.unwrap();
    shown(&s, "pt", report(1.0, Some(10.0), None), 2_000).await;
    assert_eq!(
        shown(&s, "pt", report(2.0, Some(8.0), None), 3_000).await,
        (Some(2.0), Some(10.0), None),
        "a smaller total keeps the old one"
    );
    assert_eq!(
        shown(&s, "pt", report(3.0, None, None), 4_000).await,
        (Some(3.0), Some(10.0), None),
        "a report without a total keeps it"
    );
}

async fn the_total_is_raised_to_the_progress(s: impl TaskStore) {
    s.create(record("pr", "alice", 1_000), None).await.unwrap();
    assert_eq!(
        shown(&s, "pr", report(5.0, Some(3.0), None), 2_000).await,
        (Some(5.0), Some(5.0), None)
    );
    assert_eq!(
        shown(&s, "pr", report(7.0, None, None), 3_000).await,
        (Some(7.0), Some(7.0), None),
        "progress past the stored total raises it"
    );
    s.create(record("pn", "alice", 1_000), None).await.unwrap();
    assert_eq!(
        shown(&s, "pn", report(4.0, None, None), 2_000).await,
        (Some(4.0), None, None),
        "an unknown total stays unknown"
    );
}

async fn a_report_that_changes_only_the_total_is_kept(s: impl TaskStore) {
    s.create(record("po", "alice", 1_000), None).await.unwrap();
    shown(&s, "po", report(5.0, Some(10.0), None), 2_000).await;
    assert_eq!(
        shown(&s, "po", report(5.0, Some(20.0), None), 3_000).await,
        (Some(5.0), Some(20.0), None)
    );
}

async fn the_progress_message_is_kept_until_the_task_completes(s: impl TaskStore) {
    s.create(record("pm", "alice", 1_000), None).await.unwrap();
    s.create(record("pf", "alice", 1_000), None).await.unwrap();
    for id in ["pm", "pf"] {
        assert_eq!(
            shown(&s, id, report(1.0, None, Some("scanning")), 2_000).await,
            (Some(1.0), None, Some("scanning".into()))
        );
        assert_eq!(
            shown(&s, id, report(2.0, None, None), 3_000).await,
            (Some(2.0), None, Some("scanning".into())),
            "a report without a message keeps the last one"
        );
    }
    let complete = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    let done = s
        .update("pm", &TaskStatus::ACTIVE, complete, 4_000)
        .await
        .unwrap();
    assert_eq!(done.progress_message, None, "stale once the work is done");
    assert_eq!(done.progress, Some(2.0), "the progress itself stays");
    assert_eq!(s.get("pm").await.unwrap(), Lookup::Found(done));
    let fail = TaskChange {
        status: Some(TaskStatus::Failed),
        ..Default::default()
    };
    let failed = s
        .update("pf", &TaskStatus::ACTIVE, fail, 4_000)
        .await
        .unwrap();
    assert_eq!(
        failed.progress_message.as_deref(),
        Some("scanning"),
        "a failure keeps the note of where the work stopped"
    );
}

async fn progress_never_decreases(s: impl TaskStore) {
    s.create(record("p1", "alice", 1_000), None).await.unwrap();
    let step = |p: f64| report(p, Some(10.0), None);
    s.update("p1", &TaskStatus::ACTIVE, step(5.0), 2_000)
        .await
        .unwrap();
    let t = s
        .update("p1", &TaskStatus::ACTIVE, step(3.0), 3_000)
        .await
        .unwrap();
    assert_eq!(t.progress, Some(5.0));
    let t = s
        .update("p1", &TaskStatus::ACTIVE, step(7.0), 4_000)
        .await
        .unwrap();
    assert_eq!((t.progress, t.progress_total), (Some(7.0), Some(10.0)));
}

async fn list_pages_by_owner_and_session(s: impl TaskStore) {
    for i in 0..7u64 {
        let mut t = record(&format!("l{i}"), "alice", 1_000 + i);
        t.session = Some(if i % 2 == 0 { "even" } else { "odd" }.into());
        s.create(t, None).await.unwrap();
    }
    s.create(record("other", "bob", 1_003), None).await.unwrap();
    let mut q = ListQuery {
        owner: "alice".into(),
        session: None,
        cursor: None,
        limit: 3,
    };
    let mut seen = Vec::new();
    loop {
        let page = s.list(&q).await.unwrap().unwrap();
        assert!(page.tasks.len() <= 3);
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ["l0", "l1", "l2", "l3", "l4", "l5", "l6"]);
    let odd = ListQuery {
        owner: "alice".into(),
        session: Some("odd".into()),
        cursor: None,
        limit: 10,
    };
    let page = s.list(&odd).await.unwrap().unwrap();
    assert_eq!(
        page.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["l1", "l3", "l5"]
    );
    assert_eq!(page.next_cursor, None);
    let bad = ListQuery {
        cursor: Some("not a cursor".into()),
        ..odd
    };
    assert!(s.list(&bad).await.unwrap().is_err());
}

async fn orphans_are_claimed_by_lease(s: impl TaskStore) {
    let mut fresh = record("o1", "alice", 1_000);
    fresh.lease_until = Some(50_000);
    let mut stale = record("o2", "alice", 1_000);
    stale.lease_until = Some(2_000);
    let mut done = record("o3", "alice", 1_000);
    done.status = TaskStatus::Completed;
    for t in [fresh, stale, done] {
        s.create(t, None).await.unwrap();
    }
    let claimed = s
        .claim_orphans("node-b", 10_000, false, 40_000, claim_only())
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["o2"]
    );
    assert_eq!(claimed[0].lease_owner.as_deref(), Some("node-b"));
    // node-a keeps o1; it lost o2 to node-b, o3 is finished and o4 never existed.
    let lost = s
        .renew_leases(
            "node-a",
            &["o1".into(), "o2".into(), "o3".into(), "o4".into()],
            90_000,
        )
        .await
        .unwrap();
    assert_eq!(lost, ["o2", "o3", "o4"]);
    let mut all = s
        .claim_orphans("node-c", 10_000, true, 40_000, claim_only())
        .await
        .unwrap();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        all.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["o1", "o2"]
    );
}

async fn an_update_for_a_lease_holder_fails_once_the_lease_moved(s: impl TaskStore) {
    s.create(record("h1", "alice", 1_000), None).await.unwrap();
    let finish = |holder: &str| TaskChange {
        status: Some(TaskStatus::Completed),
        holder: Some(holder.into()),
        ..Default::default()
    };
    // node-b took the task over; node-a's late outcome is refused and changes nothing.
    s.claim_orphans("node-b", 10_000, true, 40_000, claim_only())
        .await
        .unwrap();
    match s
        .update("h1", &TaskStatus::ACTIVE, finish("node-a"), 11_000)
        .await
    {
        Err(UpdateError::Conflict(cur)) => {
            assert_eq!(cur.status, TaskStatus::Working);
            assert_eq!(cur.lease_owner.as_deref(), Some("node-b"));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let done = s
        .update("h1", &TaskStatus::ACTIVE, finish("node-b"), 12_000)
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
}

/// A plan that only claims (changes nothing else).
fn claim_only() -> OrphanPlan {
    Arc::new(|_| Some(TaskChange::default()))
}

async fn orphans_are_changed_by_the_plan_in_one_step(s: impl TaskStore) {
    let mut keep_me = record("k1", "alice", 1_000);
    keep_me.retain_after_finish_ms = Some(5_000);
    let mut rerun = record("r1", "alice", 1_000);
    rerun.status = TaskStatus::InputRequired;
    let mine = record("m1", "alice", 1_000);
    for t in [keep_me, rerun, mine] {
        s.create(t, None).await.unwrap();
    }
    let plan: OrphanPlan = Arc::new(|t: &TaskRecord| match t.id.as_str() {
        "m1" => None,
        "r1" => Some(TaskChange {
            status: Some(TaskStatus::Working),
            attempt: Some(t.attempt + 1),
            ..Default::default()
        }),
        _ => Some(failed("interrupted")),
    });
    let mut changed = s
        .claim_orphans("node-b", 10_000, true, 40_000, plan)
        .await
        .unwrap();
    changed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        changed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["k1", "r1"],
        "m1 left alone"
    );
    // Stored as returned.
    for t in &changed {
        assert_eq!(s.get(&t.id).await.unwrap(), Lookup::Found(t.clone()));
    }
    let failed = &changed[0];
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(failed.finished_at, Some(10_000));
    assert_eq!(failed.lease_owner, None, "a finished task holds no lease");
    assert_eq!(failed.ttl_ms, Some(9_000 + 5_000), "retention from the end");
    assert_eq!(failed.status_message.as_deref(), Some("interrupted"));
    let again = &changed[1];
    assert_eq!(again.status, TaskStatus::Working);
    assert_eq!(again.attempt, 2);
    assert_eq!(again.lease_owner.as_deref(), Some("node-b"));
    assert_eq!(again.lease_until, Some(40_000));
    let Lookup::Found(untouched) = s.get("m1").await.unwrap() else {
        panic!("m1 is gone")
    };
    assert_eq!(untouched.lease_owner.as_deref(), Some("node-a"));
    // The failed task no longer counts against a limit; the two unfinished ones do.
    let limit = ActiveLimit {
        max: 3,
        owner: "alice".into(),
        among: Among::All,
    };
    s.create(record("n1", "alice", 11_000), Some(limit.clone()))
        .await
        .unwrap();
    match s.create(record("n2", "alice", 12_000), Some(limit)).await {
        Err(StoreError::TooManyActive { active: 3, max: 3 }) => {}
        other => panic!("expected the limit, got {other:?}"),
    }
}

async fn purge_keeps_running_tasks_and_leaves_tombstones(s: impl TaskStore) {
    let running = record("r1", "alice", 1_000);
    let mut finished = record("f1", "alice", 1_000);
    finished.status = TaskStatus::Completed;
    finished.finished_at = Some(2_000);
    let mut unlimited = record("n1", "alice", 1_000);
    unlimited.status = TaskStatus::Failed;
    unlimited.finished_at = Some(2_000);
    unlimited.ttl_ms = None;
    for t in [running, finished, unlimited] {
        s.create(t, None).await.unwrap();
    }
    let policy = |now| PurgePolicy {
        now,
        finished_grace_ms: 5_000,
        tombstone_ms: 10_000,
        session_idle_ms: 1 << 40,
        finished_before: None,
    };
    // ttl (60 s) not reached: nothing goes.
    assert_eq!(s.purge(policy(30_000)).await.unwrap().tasks, 0);
    let p = s.purge(policy(70_000)).await.unwrap();
    assert_eq!(p.tasks, 1);
    assert!(
        matches!(s.get("r1").await.unwrap(), Lookup::Found(_)),
        "running tasks are never purged"
    );
    assert!(
        matches!(s.get("n1").await.unwrap(), Lookup::Found(_)),
        "unlimited ttl is kept"
    );
    assert_eq!(
        s.get("f1").await.unwrap(),
        Lookup::Expired {
            owner: "alice".into(),
            session: Some("s1".into())
        }
    );
    let p = s.purge(policy(90_000)).await.unwrap();
    assert_eq!(p.tombstones, 1);
    assert_eq!(s.get("f1").await.unwrap(), Lookup::Missing);
}

async fn sessions_round_trip_and_expire(s: impl TaskStore) {
    let sess = SessionRecord {
        id: "sess".into(),
        owner: "alice".into(),
        data: json!({"protocolVersion": "2025-11-25"}),
        created_at: 1_000,
        last_seen: 1_000,
        idle_ms: None,
    };
    s.put_session(&sess).await.unwrap();
    assert_eq!(s.get_session("sess").await.unwrap(), Some(sess.clone()));
    assert!(s.touch_session("sess", 60_000).await.unwrap());
    assert_eq!(
        s.get_session("sess").await.unwrap().unwrap().last_seen,
        60_000
    );
    assert!(!s.touch_session("gone", 60_000).await.unwrap());
    s.put_session(&sess).await.unwrap();
    let idle = PurgePolicy {
        now: 100_000,
        finished_grace_ms: 0,
        tombstone_ms: 0,
        session_idle_ms: 50_000,
        finished_before: None,
    };
    assert_eq!(s.purge(idle).await.unwrap().sessions, 1);
    assert_eq!(s.get_session("sess").await.unwrap(), None);
    s.put_session(&sess).await.unwrap();
    assert!(s.delete_session("sess").await.unwrap());
    assert!(!s.delete_session("sess").await.unwrap());

    // A session with its own idle limit: purged past it (not the policy's), and a touch after it
    // does not bring it back.
    let short = SessionRecord {
        id: "short".into(),
        idle_ms: Some(10_000),
        ..sess.clone()
    };
    let long = SessionRecord {
        id: "long".into(),
        idle_ms: Some(500_000),
        ..sess.clone()
    };
    s.put_session(&short).await.unwrap();
    s.put_session(&long).await.unwrap();
    s.put_session(&sess).await.unwrap();
    assert_eq!(s.get_session("short").await.unwrap(), Some(short.clone()));
    assert!(
        s.touch_session("short", 10_999).await.unwrap(),
        "still live"
    );
    assert!(
        !s.touch_session("short", 30_000).await.unwrap(),
        "idle past its limit"
    );
    let policy = |now| PurgePolicy {
        now,
        finished_grace_ms: 0,
        tombstone_ms: 0,
        session_idle_ms: 50_000,
        finished_before: None,
    };
    assert_eq!(s.purge(policy(25_000)).await.unwrap().sessions, 1);
    assert_eq!(s.get_session("short").await.unwrap(), None);
    assert_eq!(
        s.purge(policy(100_000)).await.unwrap().sessions,
        1,
        "the policy's idle"
    );
    assert!(
        s.get_session("long").await.unwrap().is_some(),
        "its own, longer idle"
    );
}

async fn live_sessions_are_capped_with_the_create(s: impl TaskStore) {
    let session = |id: &str, owner: &str, at: u64| SessionRecord {
        id: id.into(),
        owner: owner.into(),
        data: json!({}),
        created_at: at,
        last_seen: at,
        idle_ms: Some(10_000),
    };
    let limit = SessionLimit {
        max: 3,
        per_prefix: Some(("a-".into(), 2)),
    };
    s.create_session(&session("a-1", "anon", 1_000), &limit)
        .await
        .unwrap();
    s.create_session(&session("a-2", "anon", 1_000), &limit)
        .await
        .unwrap();
    match s
        .create_session(&session("a-3", "anon", 2_000), &limit)
        .await
    {
        Err(StoreError::TooManySessions {
            live: 2,
            max: 2,
            of_prefix: true,
        }) => {}
        other => panic!("expected the prefix's cap, got {other:?}"),
    }
    assert_eq!(s.get_session("a-3").await.unwrap(), None, "nothing stored");
    let other = SessionLimit {
        per_prefix: Some(("b-".into(), 2)),
        ..limit.clone()
    };
    s.create_session(&session("b-1", "anon", 2_000), &other)
        .await
        .unwrap();
    match s
        .create_session(&session("b-2", "anon", 2_000), &other)
        .await
    {
        Err(StoreError::TooManySessions {
            live: 3,
            max: 3,
            of_prefix: false,
        }) => {}
        other => panic!("expected the owner's cap, got {other:?}"),
    }
    // Another owner has its own count; sessions past their idle limit do not count, purged or not.
    s.create_session(&session("a-9", "bob", 2_000), &limit)
        .await
        .unwrap();
    s.create_session(&session("a-3", "anon", 11_500), &limit)
        .await
        .unwrap();
    assert!(s.get_session("a-3").await.unwrap().is_some());
}

async fn a_task_is_found_by_its_key_for_its_owner_only(s: impl TaskStore) {
    let mut t = record("keyed", "alice", 1_000);
    t.idempotency_key = Some("op-1".into());
    s.create(t.clone(), None).await.unwrap();
    assert_eq!(s.find_by_key("alice", "op-1").await.unwrap(), Some(t));
    assert_eq!(s.find_by_key("bob", "op-1").await.unwrap(), None);
    assert_eq!(s.find_by_key("alice", "op-2").await.unwrap(), None);
}

async fn retention_after_finish_counts_from_the_end(s: impl TaskStore) {
    let mut t = record("kept", "alice", 1_000);
    t.ttl_ms = None;
    t.retain_after_finish_ms = Some(5_000);
    s.create(t.clone(), None).await.unwrap();
    let change = TaskChange {
        status: Some(TaskStatus::Completed),
        ..TaskChange::default()
    };
    let done = s
        .update("kept", &TaskStatus::ACTIVE, change, 61_000)
        .await
        .unwrap();
    assert_eq!(
        done.expires_at(),
        Some(66_000),
        "five seconds after it finished"
    );
    let policy = |now| PurgePolicy {
        now,
        finished_grace_ms: 0,
        tombstone_ms: 60_000,
        session_idle_ms: 60_000,
        finished_before: None,
    };
    s.purge(policy(65_999)).await.unwrap();
    assert!(
        matches!(s.get("kept").await.unwrap(), Lookup::Found(_)),
        "kept until then"
    );
    s.purge(policy(66_000)).await.unwrap();
    assert!(matches!(
        s.get("kept").await.unwrap(),
        Lookup::Expired { .. }
    ));
}
