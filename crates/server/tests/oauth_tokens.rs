//! Access tokens checked against a real authorization server on loopback (issue 14, item 1): RS256
//! and ES256, `at+jwt` and `JWT`, the key set found through the issuer's metadata and fetched again
//! for an unknown key (at most once per 30 s); expired, not yet valid, wrong audience, wrong issuer,
//! unknown key, bad signature and `alg: none` refused, each with its own reason.

#[path = "support/authz.rs"]
mod authz;

use authz::{now, sign, AuthServer, Key};
use mcp_tasks_server::auth::oauth::{OAuthConfig, TokenError, TokenVerifier};
use serde_json::json;

const AUDIENCE: &str = "http://127.0.0.1:9/mcp";

fn verifier(issuer: &str) -> TokenVerifier {
    TokenVerifier::new(OAuthConfig::new(issuer, AUDIENCE))
}

#[tokio::test]
async fn tokens_of_the_issuer_for_this_server_are_accepted_with_their_principal_and_scopes() {
    let (rsa, ec) = (Key::fixture("rsa-a", "r1"), Key::fixture("ec-a", "e1"));
    let idp = AuthServer::start(&[&rsa, &ec]).await;
    let v = verifier(&idp.issuer);
    let alice = sign(
        &rsa,
        "at+jwt",
        &idp.claims("alice", AUDIENCE, "tasks:read tasks:write"),
    );
    let t = v.verify(&alice).await.unwrap();
    assert_eq!(t.principal, format!("{}#alice", idp.issuer));
    assert_eq!(t.scopes, ["tasks:read", "tasks:write"]);
    // ES256, typed JWT, scopes as an array claim (`scp`), audience as an array.
    let mut claims = idp.claims("bob", AUDIENCE, "");
    claims.remove("scope");
    claims.insert("scp".into(), json!(["a", "b"]));
    claims.insert("aud".into(), json!(["other", AUDIENCE]));
    let v_scp = TokenVerifier::new(OAuthConfig {
        scopes_claim: "scp".into(),
        ..OAuthConfig::new(&idp.issuer, AUDIENCE)
    });
    let t = v_scp.verify(&sign(&ec, "JWT", &claims)).await.unwrap();
    assert_eq!(t.principal, format!("{}#bob", idp.issuer));
    assert_eq!(t.scopes, ["a", "b"]);
    assert_eq!(
        idp.fetches(),
        2,
        "one fetch per verifier, through the metadata"
    );
    // Held: no fetch for the next token.
    v.verify(&alice).await.unwrap();
    assert_eq!(idp.fetches(), 2);
}

#[tokio::test]
async fn each_way_a_token_can_be_wrong_is_refused_with_its_reason() {
    let rsa = Key::fixture("rsa-a", "r1");
    let idp = AuthServer::start(&[&rsa]).await;
    let v = verifier(&idp.issuer);
    let check = |mutate: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut c = idp.claims("alice", AUDIENCE, "x");
        mutate(&mut c);
        sign(&rsa, "at+jwt", &c)
    };
    let expired = check(&|c| {
        c.insert("exp".into(), json!(now() - 120));
    });
    assert_eq!(v.verify(&expired).await, Err(TokenError::Expired));
    // Within the 60 s leeway, an expired token still passes.
    let just = check(&|c| {
        c.insert("exp".into(), json!(now() - 10));
    });
    assert!(v.verify(&just).await.is_ok());
    let early = check(&|c| {
        c.insert("nbf".into(), json!(now() + 600));
    });
    assert_eq!(v.verify(&early).await, Err(TokenError::NotYetValid));
    let elsewhere = check(&|c| {
        c.insert("aud".into(), json!("http://127.0.0.1:9/other"));
    });
    assert_eq!(v.verify(&elsewhere).await, Err(TokenError::WrongAudience));
    let foreign = check(&|c| {
        c.insert("iss".into(), json!("http://127.0.0.1:1"));
    });
    assert_eq!(v.verify(&foreign).await, Err(TokenError::WrongIssuer));
    let nobody = check(&|c| {
        c.remove("sub");
    });
    assert_eq!(
        v.verify(&nobody).await,
        Err(TokenError::MissingClaim("sub".into()))
    );
    let no_exp = check(&|c| {
        c.remove("exp");
    });
    assert_eq!(
        v.verify(&no_exp).await,
        Err(TokenError::MissingClaim("exp".into()))
    );
    // Signed by another key under the same kid: the signature does not verify.
    let impostor = Key::fixture("rsa-b", "r1");
    let forged = sign(&impostor, "at+jwt", &idp.claims("alice", AUDIENCE, "x"));
    assert_eq!(v.verify(&forged).await, Err(TokenError::BadSignature));
    // A changed payload under the original signature.
    let good = sign(&rsa, "at+jwt", &idp.claims("alice", AUDIENCE, "x"));
    let parts: Vec<&str> = good.split('.').collect();
    let mallory = sign(&rsa, "at+jwt", &idp.claims("mallory", AUDIENCE, "x"));
    let spliced = format!(
        "{}.{}.{}",
        parts[0],
        mallory.split('.').nth(1).unwrap(),
        parts[2]
    );
    assert_eq!(v.verify(&spliced).await, Err(TokenError::BadSignature));
    // Not an access token type.
    let typed = sign(&rsa, "dpop+jwt", &idp.claims("alice", AUDIENCE, "x"));
    assert_eq!(
        v.verify(&typed).await,
        Err(TokenError::WrongType("dpop+jwt".into()))
    );
    // ES256 is not accepted when the config allows RS256 only.
    let ec = Key::fixture("ec-a", "e1");
    idp.publish(&ec);
    let rs_only = TokenVerifier::new(OAuthConfig {
        algorithms: vec![jsonwebtoken::Algorithm::RS256],
        ..OAuthConfig::new(&idp.issuer, AUDIENCE)
    });
    let es = sign(&ec, "at+jwt", &idp.claims("alice", AUDIENCE, "x"));
    assert_eq!(
        rs_only.verify(&es).await,
        Err(TokenError::Algorithm("ES256".into()))
    );
}

#[tokio::test]
async fn an_unknown_key_is_fetched_again_but_not_more_than_once_per_interval() {
    let (old, new) = (
        Key::fixture("rsa-a", "2026-01"),
        Key::fixture("rsa-b", "2026-02"),
    );
    let idp = AuthServer::start(&[&old]).await;
    let every = std::time::Duration::from_millis(400);
    let v = verifier(&idp.issuer).refresh_at_most_every(every);
    let alice = |key: &Key| sign(key, "at+jwt", &idp.claims("alice", AUDIENCE, ""));
    v.verify(&alice(&old)).await.unwrap();
    assert_eq!(idp.fetches(), 1);
    // The issuer rotates a new key in. Right after a fetch, a token of it is refused, and neither
    // it nor made-up key ids make the server fetch again within the interval.
    idp.publish(&new);
    assert_eq!(
        v.verify(&alice(&new)).await,
        Err(TokenError::UnknownKey("2026-02".into()))
    );
    for i in 0..20 {
        let made_up = Key::fixture("rsa-b", &format!("made-up-{i}"));
        assert!(matches!(
            v.verify(&alice(&made_up)).await,
            Err(TokenError::UnknownKey(_))
        ));
    }
    assert_eq!(idp.fetches(), 1, "no fetch storm");
    // Past the interval, the unknown key makes it fetch once, and the new key works.
    tokio::time::sleep(every).await;
    v.verify(&alice(&new)).await.unwrap();
    assert_eq!(idp.fetches(), 2);
    v.verify(&alice(&old)).await.unwrap();
    assert_eq!(idp.fetches(), 2, "both held now");
}

#[tokio::test]
async fn an_issuer_without_metadata_or_key_set_is_reported_as_such() {
    let v = verifier("http://127.0.0.1:1");
    let rsa = Key::fixture("rsa-a", "r1");
    let mut c = serde_json::Map::new();
    c.insert("sub".into(), json!("x"));
    match v.verify(&sign(&rsa, "at+jwt", &c)).await {
        Err(TokenError::KeySet(m)) => assert!(m.contains("no jwks_uri"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_unreadable_key_set_is_tried_again_at_most_once_per_interval_not_per_token() {
    let rsa = Key::fixture("rsa-a", "r1");
    let idp = AuthServer::start(&[&rsa]).await;
    idp.set_down(true);
    // Long enough for the checks below to run inside it on a loaded machine.
    let every = std::time::Duration::from_secs(2);
    let v = verifier(&idp.issuer).refresh_at_most_every(every);
    let alice = sign(&rsa, "at+jwt", &idp.claims("alice", AUDIENCE, ""));
    for _ in 0..10 {
        match v.verify(&alice).await {
            Err(TokenError::KeySet(m)) => assert!(m.contains("HTTP 503"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(idp.fetches(), 1, "one try for ten tokens");
    // Back up: within the interval the last failure still answers, past it one fetch succeeds.
    idp.set_down(false);
    assert!(matches!(v.verify(&alice).await, Err(TokenError::KeySet(_))));
    assert_eq!(idp.fetches(), 1);
    tokio::time::sleep(every).await;
    v.verify(&alice).await.unwrap();
    v.verify(&alice).await.unwrap();
    assert_eq!(idp.fetches(), 2);
}

#[tokio::test]
async fn a_checked_token_is_remembered_until_it_expires_and_forgotten_when_keys_are_fetched_again()
{
    let (old, new) = (Key::fixture("rsa-a", "r1"), Key::fixture("rsa-b", "r2"));
    let idp = AuthServer::start(&[&old]).await;
    let every = std::time::Duration::from_millis(200);
    let v = TokenVerifier::new(OAuthConfig {
        leeway: std::time::Duration::ZERO,
        ..OAuthConfig::new(&idp.issuer, AUDIENCE)
    })
    .refresh_at_most_every(every);
    let mut claims = idp.claims("alice", AUDIENCE, "a");
    claims.insert("exp".into(), json!(now() + 2));
    let short = sign(&old, "at+jwt", &claims);
    let alice = v.verify(&short).await.unwrap();
    assert_eq!(v.verify(&short).await.unwrap(), alice);
    assert_eq!(v.remembered(), 1);
    // Refusals are not remembered.
    let mut wrong = idp.claims("alice", "http://127.0.0.1:9/other", "a");
    wrong.insert("exp".into(), json!(now() + 60));
    let wrong = sign(&old, "at+jwt", &wrong);
    for _ in 0..2 {
        assert_eq!(v.verify(&wrong).await, Err(TokenError::WrongAudience));
    }
    assert_eq!(v.remembered(), 1);
    // Past its `exp` a remembered token is refused like any other.
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    assert_eq!(v.verify(&short).await, Err(TokenError::Expired));

    // A fetch of the key set (here for a rotated-in key) forgets every token checked before it.
    let long = sign(&old, "at+jwt", &idp.claims("bob", AUDIENCE, "a"));
    v.verify(&long).await.unwrap();
    assert_eq!(v.remembered(), 1);
    idp.publish(&new);
    v.verify(&sign(&new, "at+jwt", &idp.claims("carol", AUDIENCE, "a")))
        .await
        .unwrap();
    assert_eq!(v.remembered(), 1, "only carol's, checked after the fetch");
}

/// The requests that queued behind a slow failing fetch take its failure instead of each trying
/// again (each would wait for the identity provider in turn).
#[tokio::test]
async fn requests_waiting_for_a_slow_failing_fetch_share_its_failure() {
    let rsa = Key::fixture("rsa-a", "r1");
    let idp = AuthServer::start(&[&rsa]).await;
    idp.set_down(true);
    idp.set_delay(std::time::Duration::from_millis(800));
    let v = std::sync::Arc::new(
        verifier(&idp.issuer).refresh_at_most_every(std::time::Duration::from_millis(300)),
    );
    let alice = sign(&rsa, "at+jwt", &idp.claims("alice", AUDIENCE, ""));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let (v, t) = (v.clone(), alice.clone());
            tokio::spawn(async move { v.verify(&t).await })
        })
        .collect();
    for c in calls {
        assert!(matches!(c.await.unwrap(), Err(TokenError::KeySet(_))));
    }
    assert_eq!(idp.fetches(), 1, "one fetch for six waiting requests");
}

/// A key set is held, a token names a key it lacks, and the fetch for it fails: that token is
/// answered with the fetch's failure (a 503 to retry) until the next try, not as an unknown key
/// (a 401 that makes its client throw a good token away); tokens of held keys pass meanwhile.
#[tokio::test]
async fn a_failed_refresh_for_a_new_key_is_a_failure_to_retry_not_an_unknown_key() {
    let (old, new) = (Key::fixture("rsa-a", "r1"), Key::fixture("rsa-b", "r2"));
    let idp = AuthServer::start(&[&old]).await;
    let every = std::time::Duration::from_secs(1);
    let v = verifier(&idp.issuer).refresh_at_most_every(every);
    let token = |key: &Key, sub: &str| sign(key, "at+jwt", &idp.claims(sub, AUDIENCE, ""));
    v.verify(&token(&old, "alice")).await.unwrap();
    idp.publish(&new);
    idp.set_down(true);
    tokio::time::sleep(every).await;
    for _ in 0..3 {
        assert!(matches!(
            v.verify(&token(&new, "bob")).await,
            Err(TokenError::KeySet(_))
        ));
    }
    assert_eq!(idp.fetches(), 2, "one failed refresh");
    v.verify(&token(&old, "carol")).await.unwrap();
    idp.set_down(false);
    tokio::time::sleep(every).await;
    v.verify(&token(&new, "bob")).await.unwrap();
    assert_eq!(idp.fetches(), 3);
}
