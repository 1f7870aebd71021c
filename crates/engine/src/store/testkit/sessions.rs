//! Sessions: round trip, idle expiry and the cap on live sessions ([`SessionStore`]).

use serde_json::json;
use std::future::Future;

use crate::store::{SessionLimit, SessionRecord, SessionStore, StoreError};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: SessionStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    sessions_round_trip_and_expire(make().await).await;
    live_sessions_are_capped_with_the_create(make().await).await;
    a_session_ends_exactly_at_its_idle_limit(make().await).await;
}

/// The purge and [`SessionRecord::is_live`] agree at the edge: live until `last_seen + idle`,
/// purged from then on (with its own limit and with the one the purge is given).
async fn a_session_ends_exactly_at_its_idle_limit(s: impl SessionStore) {
    for own in [Some(10_000), None] {
        let sess = SessionRecord {
            id: "edge".into(),
            owner: "alice".into(),
            data: json!({}),
            created_at: 1_000,
            last_seen: 1_000,
            idle_ms: own,
        };
        s.put_session(&sess).await.unwrap();
        assert_eq!(
            s.purge_sessions(10_999, 10_000).await.unwrap(),
            0,
            "{own:?}"
        );
        assert!(s.get_session("edge").await.unwrap().is_some(), "{own:?}");
        assert_eq!(
            s.purge_sessions(11_000, 10_000).await.unwrap(),
            1,
            "{own:?}"
        );
        assert_eq!(s.get_session("edge").await.unwrap(), None, "{own:?}");
        if own.is_some() {
            assert!(!sess.is_live(11_000) && sess.is_live(10_999));
        }
    }
}

async fn sessions_round_trip_and_expire(s: impl SessionStore) {
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
    assert_eq!(s.purge_sessions(100_000, 50_000).await.unwrap(), 1);
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
    assert_eq!(s.purge_sessions(25_000, 50_000).await.unwrap(), 1);
    assert_eq!(s.get_session("short").await.unwrap(), None);
    assert_eq!(
        s.purge_sessions(100_000, 50_000).await.unwrap(),
        1,
        "the policy's idle"
    );
    assert!(
        s.get_session("long").await.unwrap().is_some(),
        "its own, longer idle"
    );
}

async fn live_sessions_are_capped_with_the_create(s: impl SessionStore) {
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
