//! Input requests inside tasks (MCP 2025-11-25 `input_required`, R31–R34, R41, §3.18 flow 2) over real
//! HTTP: elicitation and sampling delivered on the `tasks/result` stream or the GET stream, answers
//! routed back, and every way an answer can be wrong or late.

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use support::{next_msg, start, start_with, Client};

fn caps() -> Value {
    json!({"elicitation": {"form": {}}, "sampling": {}})
}

async fn wait_status(c: &mut Client, id: &str, status: &str) -> Value {
    for _ in 0..100 {
        let t = c.get_task(id).await;
        if t["status"] == status {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never reached {status}");
}

/// Reads a stream until a server request arrives (skipping notifications).
async fn next_request(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    loop {
        let m = next_msg(rx).await;
        if m.get("id").is_some() && m.get("method").is_some() {
            return m;
        }
        assert!(
            m.get("method").is_some(),
            "a reply came before the request: {m}"
        );
    }
}

/// Reads a stream until the reply.
async fn reply(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    loop {
        let m = next_msg(rx).await;
        if m.get("method").is_none() {
            return m;
        }
    }
}

#[tokio::test]
async fn elicitation_goes_out_on_the_tasks_result_stream_and_the_answer_completes_the_task() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let id = c
        .create_task("confirm_delete", json!({"filename": "notes.txt"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = wait_status(&mut c, &id, "input_required").await;
    assert_eq!(t["taskId"], id.as_str());
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(
        req["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert!(req["params"]["message"]
        .as_str()
        .unwrap()
        .contains("notes.txt"));
    assert!(req["id"].is_string());
    let (status, _) = c
        .respond(
            &req["id"],
            json!({"action": "accept", "content": {"confirm": true}}),
        )
        .await;
    assert_eq!(status, 202);
    let r = reply(&mut stream).await;
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Deleted notes.txt"),
        "{r}"
    );
    assert_eq!(c.get_task(&id).await["status"], "completed");
}

#[tokio::test]
async fn task_goes_back_to_working_once_answered_r34() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let mut get = c.open_stream().await;
    let id = c.create_task("multi_input", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let first = next_request(&mut get).await;
    let second = next_request(&mut get).await;
    assert_ne!(
        first["id"], second["id"],
        "two requests outstanding at once"
    );
    assert_eq!(
        wait_status(&mut c, &id, "input_required").await["status"],
        "input_required"
    );
    let answer = |m: &Value| {
        if m["params"]["message"].as_str().unwrap().contains("name") {
            json!({"action": "accept", "content": {"name": "Ada"}})
        } else {
            json!({"action": "accept", "content": {"color": "green"}})
        }
    };
    assert_eq!(c.respond(&first["id"], answer(&first)).await.0, 202);
    // One answer in, one still pending: still input_required.
    assert_eq!(c.get_task(&id).await["status"], "input_required");
    assert_eq!(c.respond(&second["id"], answer(&second)).await.0, 202);
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "completed");
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        r.result()["content"][0]["text"],
        "Hello Ada, you like green."
    );
}

#[tokio::test]
async fn sampling_request_gets_the_clients_message() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let id = c.create_task("write_haiku", json!({"topic": "rust"})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(req["method"], "sampling/createMessage");
    assert!(req["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .contains("rust"));
    let haiku = "borrow checker sings\nlifetimes fold like paper cranes\nno data races here";
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": haiku}, "model": "canned", "stopReason": "endTurn"});
    assert_eq!(c.respond(&req["id"], answer).await.0, 202);
    let r = reply(&mut stream).await;
    assert_eq!(r["result"]["content"][0]["text"], haiku);
}

#[tokio::test]
async fn declined_elicitation_reaches_the_handler_as_such() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let id = c
        .create_task("confirm_delete", json!({"filename": "a.txt"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    c.respond(&req["id"], json!({"action": "decline"})).await;
    let r = reply(&mut stream).await;
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept a.txt"));
}

#[tokio::test]
async fn client_error_answer_reaches_the_handler() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let id = c.create_task("write_haiku", json!({"topic": "x"})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(
        c.respond_error(&req["id"], -1, "User rejected sampling request")
            .await
            .0,
        202
    );
    let r = reply(&mut stream).await;
    assert_eq!(r["result"]["isError"], json!(true));
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("User rejected"));
}

#[tokio::test]
async fn unknown_and_repeated_answers_are_rejected_and_change_nothing() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let (status, body) = c
        .respond(&json!("no-such-request"), json!({"action": "accept"}))
        .await;
    assert_eq!(status, 400);
    assert!(body.contains("no pending request"), "{body}");
    let (status, _) = c.respond(&json!(12345), json!({"action": "accept"})).await;
    assert_eq!(status, 400);

    let id = c.create_task("multi_input", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    // A malformed answer is rejected and the request stays pending.
    let (status, body) = c
        .respond(&req["id"], json!({"content": {"name": "x"}}))
        .await;
    assert_eq!(status, 400, "{body}");
    // Content that is not the form's fields (an object of strings, numbers, booleans, string
    // lists) is malformed too, whatever the action says.
    for content in [
        json!("str"),
        json!(["name", "x"]),
        json!(7),
        json!({"name": {"nested": true}}),
        json!({"tags": [1, 2]}),
    ] {
        let (status, body) = c
            .respond(&req["id"], json!({"action": "accept", "content": content}))
            .await;
        assert_eq!(status, 400, "{content}: {body}");
        assert!(body.contains("-32602"), "{body}");
        assert!(
            body.contains("content"),
            "the message names the content: {body}"
        );
    }
    assert_eq!(
        c.respond(
            &req["id"],
            json!({"action": "accept", "content": {"name": "Bo", "color": "red"}})
        )
        .await
        .0,
        202
    );
    let (status, body) = c.respond(&req["id"], json!({"action": "decline"})).await;
    assert_eq!(status, 400);
    assert!(body.contains("already answered"), "{body}");
    assert_eq!(
        c.get_task(&id).await["status"],
        "input_required",
        "the other question is still open"
    );
    c.request("tasks/cancel", json!({"taskId": id})).await;
}

#[tokio::test]
async fn no_request_is_sent_to_a_client_without_the_capability() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, json!({"elicitation": {"form": {}}})).await;
    let id = c.create_task("write_haiku", json!({"topic": "x"})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "failed");
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert!(
        r.notifications.iter().all(|n| n.get("id").is_none()),
        "no sampling request went out"
    );
    assert!(r.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("sampling capability"));
    let mut bare = Client::connect(&s.url).await;
    let id = bare
        .create_task("confirm_delete", json!({"filename": "f"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    bare.wait_terminal(&id).await;
    let r = bare.request("tasks/result", json!({"taskId": id})).await;
    assert!(r.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("elicitation capability"));
}

#[tokio::test]
async fn cancel_while_input_required_wakes_handler_and_blocked_result() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let id = c
        .create_task("confirm_delete", json!({"filename": "b"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    let cancelled = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled.result()["status"], "cancelled");
    let r = reply(&mut stream).await;
    assert_eq!(r["error"]["code"], -32603);
    assert_eq!(r["error"]["data"]["status"], "cancelled");
    // A late answer is refused: the task is over.
    let (status, body) = c
        .respond(
            &req["id"],
            json!({"action": "accept", "content": {"confirm": true}}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(body.contains("cancelled"), "{body}");
    assert_eq!(c.get_task(&id).await["status"], "cancelled");
}

#[tokio::test]
async fn ttl_expiry_while_waiting_for_input_fails_the_task_and_answers_the_blocked_result() {
    let engine = EngineConfig {
        min_ttl_ms: 1,
        sweep_interval: Duration::from_millis(100),
        ..support::fast_engine()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        engine,
        ServerConfig::default(),
        vec![],
    )
    .await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "c"}, "task": {"ttl": 600}}),
        )
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let _req = next_request(&mut stream).await;
    let r = reply(&mut stream).await;
    assert_eq!(r["error"]["code"], -32603);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("expired"),
        "{r}"
    );
    let t = c.get_task(&id).await;
    assert_eq!(t["status"], "failed");
}

#[tokio::test]
async fn request_on_the_get_stream_is_not_sent_again_on_tasks_result() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let mut get = c.open_stream().await;
    let id = c
        .create_task("confirm_delete", json!({"filename": "d"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let req = next_request(&mut get).await;
    assert_eq!(req["method"], "elicitation/create");
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        stream.try_recv().is_err(),
        "nothing re-sent while the GET stream that got it is open"
    );
    c.respond(
        &req["id"],
        json!({"action": "accept", "content": {"confirm": false}}),
    )
    .await;
    let r = reply(&mut stream).await;
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept d"));
}

#[tokio::test]
async fn a_new_tasks_result_re_sends_requests_whose_stream_is_gone() {
    let s = start(vec![]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let id = c
        .create_task("confirm_delete", json!({"filename": "e"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut first = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut first).await;
    drop(first); // the client disconnects without answering
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut second = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let again = next_request(&mut second).await;
    assert_eq!(again["id"], req["id"], "the same request, with the same id");
    c.respond(
        &again["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let r = reply(&mut second).await;
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Deleted e"));
}

#[tokio::test]
async fn inline_call_can_elicit_on_its_own_stream() {
    let ask = ask_inline_tool();
    let s = start(vec![ask]).await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let mut stream = c
        .stream_request("tools/call", json!({"name": "ask_inline", "arguments": {}}))
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(
        c.respond(
            &req["id"],
            json!({"action": "accept", "content": {"ok": true}})
        )
        .await
        .0,
        202
    );
    let r = reply(&mut stream).await;
    assert_eq!(r["result"]["content"][0]["text"], "answer true");
}

#[tokio::test]
async fn url_mode_elicitation_goes_only_to_clients_that_declared_it() {
    use mcp_tasks_server::tool::{handler_fn, text_result, Ask, Elicitation, Tool};
    let sign_in = Tool::new(
        "sign_in",
        handler_fn(|ctx, _args| async move {
            match ctx
                .elicit_url("Sign in to continue", "https://example.invalid/login")
                .await
            {
                Ok(Elicitation::Accept(_)) => text_result("signed in", false),
                Ok(other) => text_result(format!("not signed in: {other:?}"), false),
                Err(e) => text_result(format!("cannot ask: {e}"), true),
            }
        }),
    )
    .task_support(mcp_tasks_protocol::mcp_2025::TaskSupport::Required);
    let s = start(vec![sign_in]).await;
    let mut form_only = Client::connect_caps(&s.url, json!({"elicitation": {"form": {}}})).await;
    let id = form_only.create_task("sign_in", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    form_only.wait_terminal(&id).await;
    let r = form_only
        .request("tasks/result", json!({"taskId": id}))
        .await;
    assert!(r.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("URL-mode"));

    let mut c = Client::connect_caps(&s.url, json!({"elicitation": {"form": {}, "url": {}}})).await;
    let id = c.create_task("sign_in", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(req["params"]["mode"], "url");
    assert!(req["params"]["elicitationId"].is_string());
    c.respond(&req["id"], json!({"action": "accept"})).await;
    assert_eq!(
        reply(&mut stream).await["result"]["content"][0]["text"],
        "signed in"
    );
}

#[tokio::test]
async fn a_prompt_that_asks_is_served_on_a_stream_over_http() {
    let s = support::start_demo().await;
    let mut c = Client::connect_caps(&s.url, caps()).await;
    let mut stream = c
        .stream_request(
            "prompts/get",
            json!({"name": "test_input_required_result_prompt"}),
        )
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(
        c.respond(
            &req["id"],
            json!({"action": "accept", "content": {"context": "tests"}})
        )
        .await
        .0,
        202
    );
    let r = reply(&mut stream).await;
    assert!(r["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .contains("tests"));
}

#[tokio::test]
async fn only_the_calling_session_can_answer_a_plain_calls_question() {
    let ask = ask_inline_tool();
    let s = start(vec![ask]).await;
    let mut a = Client::connect_caps(&s.url, caps()).await;
    let b = Client::connect_caps(&s.url, caps()).await;
    let mut stream = a
        .stream_request("tools/call", json!({"name": "ask_inline", "arguments": {}}))
        .await;
    let req = next_request(&mut stream).await;
    let (status, _) = b
        .respond(
            &req["id"],
            json!({"action": "accept", "content": {"ok": false}}),
        )
        .await;
    assert_eq!(status, 400, "another session's answer is refused");
    assert_eq!(
        a.respond(
            &req["id"],
            json!({"action": "accept", "content": {"ok": true}})
        )
        .await
        .0,
        202
    );
    assert_eq!(
        reply(&mut stream).await["result"]["content"][0]["text"],
        "answer true"
    );
}

#[tokio::test]
async fn a_tasks_result_in_another_session_gets_questions_asked_later() {
    use mcp_tasks_server::tool::{handler_fn, text_result, Ask, Elicitation, Tool};
    let late = Tool::new(
        "late_ask",
        handler_fn(|ctx, _args| async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match ctx
                .elicit(
                    "now?",
                    json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                )
                .await
            {
                Ok(Elicitation::Accept(_)) => text_result("asked late, answered", false),
                other => text_result(format!("{other:?}"), true),
            }
        }),
    )
    .task_support(mcp_tasks_protocol::mcp_2025::TaskSupport::Required);
    let s = start(vec![late]).await;
    let mut first = Client::connect_caps(&s.url, caps()).await;
    let id = first.create_task("late_ask", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    // The client reconnects: a new session fetches the result of its task by id.
    let mut second = Client::connect_caps(&s.url, caps()).await;
    let mut stream = second
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = next_request(&mut stream).await;
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(
        second
            .respond(
                &req["id"],
                json!({"action": "accept", "content": {"ok": true}})
            )
            .await
            .0,
        202
    );
    assert_eq!(
        reply(&mut stream).await["result"]["content"][0]["text"],
        "asked late, answered"
    );
}

/// An optional tool that asks one yes/no question inline and reports the answer.
fn ask_inline_tool() -> mcp_tasks_server::Tool {
    use mcp_tasks_server::tool::{handler_fn, text_result, Ask, Elicitation, Tool};
    Tool::new(
        "ask_inline",
        handler_fn(|ctx, _args| async move {
            let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
            match ctx.elicit("ok?", schema).await {
                Ok(Elicitation::Accept(c)) => text_result(format!("answer {}", c["ok"]), false),
                other => text_result(format!("{other:?}"), true),
            }
        }),
    )
    .task_support(mcp_tasks_protocol::mcp_2025::TaskSupport::Optional)
}
