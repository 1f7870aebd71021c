//! Strict reading of HTTP requests on both wires (issue 13, item 5): a deciding header sent twice, a
//! JSON object with a key twice, a body not declared as JSON, and an `Accept` that allows no reply
//! form are each refused with a JSON-RPC error that says what was wrong; an `Accept` that allows one
//! form gets the reply in that form. Unknown paths and methods get JSON-RPC errors too (item 6).

mod support;

use serde_json::{json, Value};
use support::{read_exchange, start_demo, Client, Exchange};

const V2026: &str = "2026-07-28";

async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> Exchange {
    let mut rb = reqwest::Client::new().post(url).body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    read_exchange(rb.send().await.unwrap()).await
}

const JSON: (&str, &str) = ("content-type", "application/json");
const BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");
/// Header names and values.
type Headers = Vec<(&'static str, String)>;

/// A valid plain request on each wire (2025-11-25 in session `sid`, and 2026-07-28): its headers and body.
fn wires(sid: &str) -> Vec<(&'static str, Headers, String)> {
    // 2026-07-28 has no ping; tools/list is as plain.
    let ping_2026 = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    vec![
        (
            "2025-11-25",
            vec![
                ("mcp-session-id", sid.to_string()),
                ("mcp-protocol-version", "2025-11-25".into()),
            ],
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_string(),
        ),
        (
            V2026,
            vec![
                ("mcp-protocol-version", V2026.into()),
                ("mcp-method", "tools/list".into()),
            ],
            ping_2026.to_string(),
        ),
    ]
}

fn with<'a>(
    base: &'a [(&'static str, String)],
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut h: Vec<(&str, &str)> = base.iter().map(|(k, v)| (*k, v.as_str())).collect();
    h.extend_from_slice(extra);
    h
}

#[tokio::test]
async fn a_deciding_header_sent_twice_is_refused_and_named() {
    let s = start_demo().await;
    let sid = Client::connect(&s.url).await.session.unwrap();
    for (wire, base, ping) in wires(&sid) {
        let ok = post(&s.url, &with(&base, &[JSON, BOTH]), &ping).await;
        assert_eq!(ok.status, 200, "{wire}: a valid ping: {:?}", ok.reply);
        for (name, shown, value) in [
            ("mcp-method", "Mcp-Method", "tasks/list"),
            ("mcp-name", "Mcp-Name", "x"),
            ("mcp-session-id", "Mcp-Session-Id", "other"),
            ("mcp-protocol-version", "MCP-Protocol-Version", V2026),
            ("authorization", "Authorization", "Bearer nope"),
        ] {
            // The header twice: once as the request has it (or a value), then another value.
            let first = base
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_str())
                .unwrap_or(value);
            let mut h: Vec<(&str, &str)> = base
                .iter()
                .filter(|(k, _)| *k != name)
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            h.extend_from_slice(&[JSON, BOTH, (name, first), (name, value)]);
            let ex = post(&s.url, &h, &ping).await;
            assert_eq!(ex.status, 400, "{wire}: {name} twice");
            let reply = ex.reply.as_ref().expect("a JSON-RPC body");
            assert_eq!(reply["error"]["code"], -32600, "{wire}: {name}: {reply}");
            let message = reply["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("the {shown} header appears more than once")),
                "{wire}: {name}: {message}"
            );
        }
    }
    // GET and DELETE are read the same way.
    let http = reqwest::Client::new();
    for req in [http.get(&s.url), http.delete(&s.url)] {
        let resp = req
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .header("mcp-session-id", "other")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Mcp-Session-Id"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_json_key_sent_twice_is_refused_on_both_wires() {
    let s = start_demo().await;
    let sid = Client::connect(&s.url).await.session.unwrap();
    for (wire, base, _) in wires(&sid) {
        for (body, key) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tasks/list"}"#,
                "method",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#, "id"),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"a":1,"a":2}}}"#,
                "a",
            ),
        ] {
            let ex = post(&s.url, &with(&base, &[JSON, BOTH]), body).await;
            assert_eq!(ex.status, 400, "{wire}: {body}");
            let reply = ex.reply.as_ref().expect("a JSON-RPC body");
            assert_eq!(reply["error"]["code"], -32700, "{wire}: {reply}");
            let message = reply["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("{key:?} appears twice")),
                "{wire}: {message}"
            );
        }
    }
}

#[tokio::test]
async fn the_body_must_be_declared_as_json() {
    let s = start_demo().await;
    let sid = Client::connect(&s.url).await.session.unwrap();
    for (wire, base, ping) in wires(&sid) {
        for (ct, want) in [
            (
                Some("text/plain"),
                "Content-Type must be application/json, got \"text/plain\"",
            ),
            (
                Some("application/jsonp"),
                "Content-Type must be application/json",
            ),
            (None, "missing Content-Type"),
        ] {
            let mut extra = vec![BOTH];
            if let Some(ct) = ct {
                extra.push(("content-type", ct));
            }
            let ex = post(&s.url, &with(&base, &extra), &ping).await;
            assert_eq!(ex.status, 415, "{wire}: {ct:?}");
            let message = ex.reply.as_ref().unwrap()["error"]["message"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(message.contains(want), "{wire}: {message}");
        }
        let ok = post(
            &s.url,
            &with(
                &base,
                &[BOTH, ("content-type", "Application/JSON; charset=utf-8")],
            ),
            &ping,
        )
        .await;
        assert_eq!(ok.status, 200, "{wire}: parameters are allowed");
    }
}

#[tokio::test]
async fn accept_decides_the_form_of_the_reply() {
    let s = start_demo().await;
    let sid = Client::connect(&s.url).await.session.unwrap();
    for (wire, base, ping) in wires(&sid) {
        // Nothing the reply could be.
        for accept in ["text/html", "application/json;q=0, text/event-stream;q=0"] {
            let ex = post(&s.url, &with(&base, &[JSON, ("accept", accept)]), &ping).await;
            assert_eq!(ex.status, 406, "{wire}: {accept}");
            let reply = ex.reply.as_ref().unwrap();
            assert_eq!(reply["id"], 1, "{wire}: the request's id");
            assert!(
                reply["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Accept must allow"),
                "{wire}: {reply}"
            );
        }
        // Only streams: the reply comes as one.
        let ex = post(
            &s.url,
            &with(&base, &[JSON, ("accept", "text/event-stream")]),
            &ping,
        )
        .await;
        assert_eq!(ex.status, 200, "{wire}");
        assert!(
            ex.content_type.starts_with("text/event-stream"),
            "{wire}: {}",
            ex.content_type
        );
        assert!(
            ex.reply.as_ref().unwrap()["result"].is_object(),
            "{wire}: {:?}",
            ex.reply
        );
    }
    // Only JSON, for a call that reports progress on the way: the reply alone, as JSON.
    let (_, base, _) = wires(&sid).remove(0);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 0.6}, "_meta": {"progressToken": "p"}}});
    let ex = post(
        &s.url,
        &with(&base, &[JSON, ("accept", "application/json")]),
        &call.to_string(),
    )
    .await;
    assert_eq!(ex.status, 200);
    assert!(
        ex.content_type.starts_with("application/json"),
        "{}",
        ex.content_type
    );
    assert!(ex.notifications.is_empty());
    assert_eq!(ex.reply.as_ref().unwrap()["id"], 7);
    assert!(
        ex.reply.as_ref().unwrap()["result"]["content"].is_array(),
        "{:?}",
        ex.reply
    );
    // Both: the same call streams its progress.
    let ex = post(&s.url, &with(&base, &[JSON, BOTH]), &call.to_string()).await;
    assert!(
        ex.content_type.starts_with("text/event-stream"),
        "{}",
        ex.content_type
    );
    assert!(!ex.notifications.is_empty());
}

#[tokio::test]
async fn every_answer_is_json_rpc_with_the_right_status() {
    let s = start_demo().await;
    let base = s.url.trim_end_matches("/mcp").to_string();
    let http = reqwest::Client::new();
    let resp = http.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing is served at \"/nope\""),
        "{body}"
    );
    for method in ["PUT", "PATCH", "OPTIONS", "TRACE"] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let resp = http.request(m, &s.url).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 405, "{method}");
        assert_eq!(resp.headers()["allow"], "GET, POST, DELETE", "{method}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("does not serve {method}")),
            "{method}: {body}"
        );
    }
    // HEAD has no body by definition, but the status says the same.
    let resp = http.head(&s.url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
}

#[tokio::test]
async fn errors_say_what_was_actually_wrong() {
    let s = start_demo().await;
    let mut c = Client::connect(&s.url).await;
    // A method name with a trailing space is not a task method this session lacks.
    let ex = c.request("tasks/get ", json!({"taskId": "x"})).await;
    assert_eq!(ex.error_code(), -32601);
    assert_eq!(ex.error()["message"], "Method not found: \"tasks/get \"");
    // A task poll interval that is not one is refused like a bad ttl.
    for bad in [json!(-1), json!("soon"), json!({"ms": 5})] {
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {"pollInterval": bad}}),
            )
            .await;
        assert_eq!(ex.error_code(), -32602, "{bad}");
        assert!(
            ex.error()["message"]
                .as_str()
                .unwrap()
                .contains("task.pollInterval must be a non-negative number"),
            "{bad}: {:?}",
            ex.reply
        );
    }
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {"pollInterval": 500, "ttl": 60000}}),
        )
        .await;
    assert!(ex.result()["task"]["taskId"].is_string(), "{:?}", ex.reply);
}

#[tokio::test]
async fn too_many_or_too_large_headers_get_a_431_with_a_json_rpc_error() {
    let s = start_demo().await;
    let http = reqwest::Client::new();
    let mut many = http
        .post(&s.url)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    for i in 0..150 {
        many = many.header(format!("x-filler-{i}"), "1");
    }
    let large = http
        .post(&s.url)
        .header("content-type", "application/json")
        .header("x-large", "a".repeat(80 * 1024))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    for (req, want) in [
        (many, "headers; at most 100"),
        (large, "bytes of headers; at most 65536"),
    ] {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 431);
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains(want),
            "{body}"
        );
    }
}

/// Writes `request` on a fresh connection and reads the whole answer (the server closes it).
async fn raw(url: &str, request: &[u8]) -> (u16, String, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer (and close) before it has read everything of a huge request.
    let _ = tcp.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_end(&mut answer),
    )
    .await
    .expect("the server answers and closes");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let body: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("not a JSON body ({e}): {head:?} {body:?}"));
    (status, head.to_string(), body)
}

#[tokio::test]
async fn requests_hyper_cannot_read_still_get_a_json_rpc_error() {
    let s = start_demo().await;
    let big = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "a byte not allowed in a header",
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Bad: \xff\x00\r\nContent-Length: 2\r\n\r\n{}"
                .to_vec(),
            400,
        ),
        (
            "two Content-Length headers that disagree",
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
                .to_vec(),
            400,
        ),
        ("a 1 MiB header", big.into_bytes(), 431),
        ("not HTTP at all", b"GARBAGE\r\n\r\n".to_vec(), 400),
    ];
    for (what, request, want) in cases {
        let (status, head, body) = raw(&s.url, &request).await;
        assert_eq!(status, want, "{what}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{what}: {head}"
        );
        assert_eq!(body["jsonrpc"], "2.0", "{what}");
        assert_eq!(body["error"]["code"], -32600, "{what}: {body}");
        assert!(body["error"]["message"].is_string(), "{what}");
    }
    // Answers of the router itself on the same kind of connection are untouched.
    let (status, _, body) = raw(
        &s.url,
        b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 404);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nothing is served"));
}
