//! `task.progress` webhook events are paced by the engine: at most one per interval of a run, and
//! the latest progress is still sent at the end of an interval in which reports were held back.

use async_trait::async_trait;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::webhook::{DeliveryQuery, EventSnapshot, WebhookEvent, WebhookTarget};
use mcp_tasks_engine::{
    Engine, EngineConfig, NewTask, Outcome, TaskContext, TaskHandler, TaskStatus,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const INTERVAL: Duration = Duration::from_millis(200);
const REPORTS: u64 = 30;

/// Reports progress 1..=30 every 10 ms, then works on quietly for a while and finishes.
struct Reports;

#[async_trait]
impl TaskHandler for Reports {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        for i in 1..=REPORTS {
            ctx.progress(i as f64, Some(REPORTS as f64), Some(format!("item {i}")))
                .await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        Outcome::Result {
            value: json!({"content": []}),
            is_error: false,
        }
    }
}

fn target(events: Vec<WebhookEvent>) -> WebhookTarget {
    WebhookTarget {
        url: "https://hooks.example/progress".into(),
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        events,
        subscription: None,
    }
}

async fn finished(store: &Arc<dyn TaskStore>, id: &str) {
    let wait = async {
        loop {
            if let mcp_tasks_engine::store::Lookup::Found(t) = store.get(id).await.unwrap() {
                if t.status == TaskStatus::Completed {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("the task completes within 10 s");
}

#[tokio::test]
async fn progress_events_are_paced_and_the_latest_progress_still_goes_out() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    let config = EngineConfig {
        webhook_progress_interval: INTERVAL,
        ..EngineConfig::default()
    };
    let engine = Engine::builder(store.clone(), config)
        .handler("reports", Arc::new(Reports), true)
        .build();
    engine.start().await.unwrap();
    let mut asks = NewTask::new("reports", json!({}));
    asks.webhooks = vec![target(vec![
        WebhookEvent::Progress,
        WebhookEvent::Completed,
    ])];
    let id = engine.submit(asks).await.unwrap().record.id;
    // The same work for a target that names no events: status events only.
    let mut quiet = NewTask::new("reports", json!({}));
    quiet.webhooks = vec![target(Vec::new())];
    let quiet = engine.submit(quiet).await.unwrap().record.id;
    finished(&store, &id).await;
    finished(&store, &quiet).await;

    let mut events = store
        .deliveries(&DeliveryQuery {
            task_id: Some(id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    events.reverse();
    let (last, progress) = events.split_last().expect("events were written");
    assert_eq!(last.entry.event, WebhookEvent::Completed, "completion last");
    assert!(progress
        .iter()
        .all(|d| d.entry.event == WebhookEvent::Progress));
    // 30 reports over about 300 ms (more on a loaded machine): one event at once, then at most one
    // per interval (checked below), not one per report.
    assert!(
        (2..=10).contains(&progress.len()),
        "{} progress events for {REPORTS} reports",
        progress.len()
    );
    let seen: Vec<EventSnapshot> = progress
        .iter()
        .map(|d| serde_json::from_str(&d.entry.snapshot).unwrap())
        .collect();
    for pair in progress.windows(2) {
        let gap = pair[1].entry.created_at - pair[0].entry.created_at;
        assert!(
            gap + 5 >= INTERVAL.as_millis() as u64,
            "events {gap} ms apart, the interval is {INTERVAL:?}"
        );
    }
    assert_eq!(seen[0].progress, Some(1.0), "the first report goes at once");
    // The reports held back at the end went out when their interval ended, as the task was then.
    let latest = seen.last().unwrap();
    assert_eq!(
        (
            latest.status,
            latest.progress,
            latest.progress_total,
            latest.progress_message.as_deref()
        ),
        (
            TaskStatus::Working,
            Some(REPORTS as f64),
            Some(REPORTS as f64),
            Some("item 30")
        )
    );

    let quiet_events = store
        .deliveries(&DeliveryQuery {
            task_id: Some(quiet),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        quiet_events
            .iter()
            .map(|d| d.entry.event)
            .collect::<Vec<_>>(),
        [WebhookEvent::Completed],
        "no progress for a target that did not ask"
    );
    engine.shutdown();
}
