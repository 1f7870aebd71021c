//! The operator's endpoints of `mcp-tasks serve`: `/metrics` counts a known workload exactly,
//! `/readyz` turns 503 (saying why) while the store cannot take a write, and `[admin] listen`
//! moves them off the MCP address.

mod common;

use common::{text, ClientCli as Cli, ServerProcess};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The samples of a text exposition: `name{labels}` → value.
fn parse(exposition: &str) -> HashMap<String, f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

async fn scrape(base: &str) -> HashMap<String, f64> {
    let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    parse(&r.text().await.unwrap())
}

fn base_of(url: &str) -> String {
    url.trim_end_matches("/mcp").to_string()
}

/// How much `key` grew from `before` to `after` (absent counts as 0).
fn delta(before: &HashMap<String, f64>, after: &HashMap<String, f64>, key: &str) -> f64 {
    after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_by_exactly_a_known_workload() {
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let base = base_of(&server.url);
    let cli = Cli::new(&server.url);
    let before = scrape(&base).await;
    // Two tasks that complete, one with a tool error, one with a JSON-RPC error, one cancelled.
    for args in [
        &["call", "slow_compute", "seconds=0"][..],
        &["call", "slow_compute", "seconds=0"][..],
        &["call", "failing_job"][..],
        &["call", "protocol_error_job"][..],
    ] {
        let _ = cli.run(args);
    }
    let out = cli.run(&["call", "slow_compute", "seconds=60", "--detach"]);
    let id = text(&out.stdout).trim().to_string();
    let out = cli.run(&["task", "cancel", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The cancel is stored before the reply; give the counters a moment all the same.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = scrape(&base).await;

    let wire = "2026-07-28";
    let created =
        |tool: &str| format!("mcp_tasks_created_total{{tool=\"{tool}\",wire=\"{wire}\"}}");
    let finished = |tool: &str, status: &str| {
        format!("mcp_tasks_finished_total{{status=\"{status}\",tool=\"{tool}\"}}")
    };
    assert_eq!(delta(&before, &after, &created("slow_compute")), 3.0);
    assert_eq!(delta(&before, &after, &created("failing_job")), 1.0);
    assert_eq!(delta(&before, &after, &created("protocol_error_job")), 1.0);
    assert_eq!(
        delta(&before, &after, &finished("slow_compute", "completed")),
        2.0
    );
    assert_eq!(
        delta(&before, &after, &finished("slow_compute", "cancelled")),
        1.0
    );
    assert_eq!(
        delta(&before, &after, &finished("failing_job", "failed")),
        1.0
    );
    assert_eq!(
        delta(&before, &after, &finished("protocol_error_job", "failed")),
        1.0
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "mcp_tasks_duration_seconds_count{tool=\"slow_compute\"}"
        ),
        3.0
    );
    assert_eq!(
        delta(&before, &after, "mcp_tasks_queue_wait_seconds_count"),
        5.0
    );
    assert_eq!(after["mcp_tasks_running{status=\"working\"}"], 0.0);
    assert_eq!(after["mcp_tasks_running{status=\"input_required\"}"], 0.0);
    // Five creates answered, one cancel.
    assert_eq!(
        delta(
            &before,
            &after,
            "mcp_requests_total{method=\"tools/call\",outcome=\"ok\"}"
        ),
        5.0
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "mcp_requests_total{method=\"tasks/cancel\",outcome=\"ok\"}"
        ),
        1.0
    );
    assert!(
        delta(
            &before,
            &after,
            "mcp_store_operation_seconds_count{op=\"create\"}"
        ) >= 5.0
    );
    assert!(after.contains_key("mcp_sessions_active"));
    assert!(after.contains_key("mcp_rate_limited_total"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_503_and_why_while_the_store_cannot_take_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let store = format!("sqlite://{}", db.display());
    // With keys configured, so that the reason is the operator's to see.
    let cfg = keys_config(dir.path());
    let server = ServerProcess::start(&["--demo", "--store", &store, "--config", &cfg]);
    let base = base_of(&server.url);
    let ready_as = |base: String, key: Option<&'static str>| async move {
        let mut rb = reqwest::Client::new().get(format!("{base}/readyz"));
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };
    let ready = |base: String| ready_as(base, Some("key-ops"));
    let (status, body) = ready(base.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["checks"]["store_write"]["ok"], true);
    assert_eq!(body["checks"]["sweeper"]["ok"], true);
    let live = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(live.status(), 200);

    // Another process holds the database's write lock: writes cannot get through.
    let locker = std::thread::spawn({
        let db = db.clone();
        move || {
            let conn = rusqlite::Connection::open(&db).unwrap();
            conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
            std::thread::sleep(Duration::from_secs(8));
            conn.execute_batch("COMMIT").unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = ready(base.clone()).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["checks"]["store_write"]["ok"], false);
    assert!(body["checks"]["store_write"]["error"].is_string(), "{body}");
    assert_ne!(
        body["checks"]["store_write"]["error"],
        "(shown to operators)"
    );
    assert_eq!(body["status"], "not ready");
    // Anyone sees the status; only an operator why.
    let (status, body) = ready_as(base.clone(), None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["checks"]["store_write"]["ok"], false);
    assert_eq!(
        body["checks"]["store_write"]["error"],
        "(shown to operators)"
    );
    locker.join().unwrap();
    let (status, body) = ready(base.clone()).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listen_moves_metrics_and_health_off_the_mcp_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin = format!("127.0.0.1:{port}");
    let server = ServerProcess::start(&["--demo", "--store", "memory:", "--admin-listen", &admin]);
    let base = base_of(&server.url);
    let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(r.status(), 404, "not next to /mcp");
    let metrics = scrape(&format!("http://{admin}")).await;
    assert!(metrics.contains_key("mcp_sessions_active"));
    for path in ["/healthz", "/readyz"] {
        let r = reqwest::get(format!("http://{admin}{path}")).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
}

#[test]
fn admin_commands_list_show_cancel_and_purge_every_principals_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = keys_config(dir.path());
    let server = ServerProcess::start(&["--demo", "--store", "memory:", "--config", &cfg]);
    let base = base_of(&server.url);
    let cli = Cli::new(&server.url);
    let as_alice = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--key", "key-alice"]);
        cli.run(&all)
    };
    as_alice(&["call", "slow_compute", "seconds=0"]);
    as_alice(&["call", "failing_job"]);
    let out = as_alice(&["call", "slow_compute", "seconds=60", "--detach"]);
    let running = text(&out.stdout).trim().to_string();
    let admin = |key: Option<&str>, args: &[&str]| {
        let mut all = vec!["admin", "--url", &base];
        if let Some(k) = key {
            all.extend(["--key", k]);
        }
        all.extend(args);
        cli.run(&all)
    };
    let json = |out: std::process::Output| -> serde_json::Value {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let out = admin(Some("key-ops"), &["tasks"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("ID "), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");
    for status in ["completed", "failed", "working"] {
        assert!(table.contains(status), "{table}");
    }
    let failed = json(admin(
        Some("key-ops"),
        &["tasks", "--status", "failed", "--json"],
    ));
    assert_eq!(failed.as_array().unwrap().len(), 1, "{failed}");
    assert_eq!(failed[0]["tool"], "failing_job");
    assert_eq!(failed[0]["principal"], "alice");
    let slow = json(admin(
        Some("key-ops"),
        &[
            "tasks",
            "--principal",
            "alice",
            "--tool",
            "slow_compute",
            "--json",
        ],
    ));
    assert_eq!(slow.as_array().unwrap().len(), 2, "{slow}");

    let shown = json(admin(Some("key-ops"), &["show", &running, "--json"]));
    assert_eq!(shown["status"], "working");
    assert_eq!(shown["arguments"]["seconds"], 60);
    let out = admin(Some("key-ops"), &["show", &running]);
    assert!(
        text(&out.stdout).contains("arguments"),
        "{}",
        text(&out.stdout)
    );

    let out = admin(Some("key-ops"), &["cancel", &running]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = json(admin(Some("key-ops"), &["show", &running, "--json"]));
    assert_eq!(shown["status"], "cancelled");
    assert!(
        shown["statusMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("operator ops"),
        "{shown}"
    );
    let out = admin(Some("key-ops"), &["cancel", &running]);
    assert_eq!(out.status.code(), Some(1), "already finished");
    // The status history: created working, then cancelled by the operator.
    let steps: Vec<&str> = shown["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["working", "cancelled"], "{shown}");
    let failed_id = failed[0]["taskId"].as_str().unwrap();
    let f = json(admin(Some("key-ops"), &["show", failed_id, "--json"]));
    let last = f["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["status"], "failed",
        "a tool error shows as failed: {f}"
    );

    // Only operators.
    let out = admin(Some("key-alice"), &["tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not an operator"),
        "{}",
        text(&out.stderr)
    );
    let out = admin(None, &["tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("operator's credentials"),
        "{}",
        text(&out.stderr)
    );

    let out = admin(Some("key-ops"), &["purge", "--finished-before", "0s"]);
    assert_eq!(
        text(&out.stdout).trim(),
        "purged 3 tasks",
        "{}",
        text(&out.stderr)
    );
    let left = json(admin(Some("key-ops"), &["tasks", "--json"]));
    assert_eq!(left, serde_json::json!([]));
}

/// The step journal of a running `pipeline` from the admin commands: `admin show` lists each step
/// with its run, duration and output; `journal export` prints it whole (what `replay_check`
/// replays); `journal rewind --from N` runs the task again from item 1, the steps before replayed
/// (their attempt stays 1); a finished task is not rewound (exit 1, saying why).
#[test]
fn the_journal_is_shown_exported_and_rewound_from_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = keys_config(dir.path());
    let db = dir.path().join("tasks.db");
    let store = format!("sqlite:{}", db.display());
    let server = ServerProcess::start(&["--demo", "--store", &store, "--config", &cfg]);
    let base = base_of(&server.url);
    let cli = Cli::new(&server.url);
    let out = cli.run(&[
        "call",
        "pipeline",
        "items=5",
        "seconds_per_item=1",
        "--detach",
        "--key",
        "key-alice",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let admin = |args: &[&str]| {
        let mut all = vec!["admin", "--url", &base, "--key", "key-ops"];
        all.extend(args);
        cli.run(&all)
    };
    let export = || -> serde_json::Value {
        let out = admin(&["journal", "export", &id]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // Wait for item 1's step: places 0–3 are sleep, item 0, sleep, item 1.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let journal = loop {
        let j = export();
        if j["steps"].as_array().unwrap().len() >= 4 {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "no steps: {j}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(journal["task_id"], id.as_str());
    assert_eq!(journal["tool"], "pipeline");
    assert_eq!(journal["arguments"]["items"], 5);
    let item1 = journal["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "item 1")
        .unwrap()
        .clone();
    assert_eq!(
        item1["output"],
        serde_json::json!({"item": 1, "attempt": 1})
    );
    assert_eq!(item1["attempt"], 1);
    let from = item1["seq"].as_u64().unwrap().to_string();

    let shown = text(&admin(&["show", &id]).stdout);
    assert!(
        shown.contains("item 1  attempt 1,") && shown.contains("\"item\":1"),
        "{shown}"
    );
    assert!(shown.contains(" ms, at "), "{shown}");

    let out = admin(&["journal", "rewind", &id, "--from", &from]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("step(s) dropped"),
        "{}",
        text(&out.stdout)
    );
    let out = cli.run(&["task", "result", &id, "--key", "key-alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let done = serde_json::from_slice::<serde_json::Value>(&admin(&["show", &id, "--json"]).stdout)
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    let steps = &done["result"]["structuredContent"]["steps"];
    assert_eq!(steps[0]["attempt"], 1, "item 0 replayed: {done}");
    assert_eq!(steps[1]["attempt"], 2, "item 1 run again: {done}");
    let history = done["history"].to_string();
    assert!(
        history.contains(&format!(
            "rewound by operator ops: runs again from step {from}"
        )),
        "{history}"
    );

    let out = admin(&["journal", "restart", &id]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is final"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn json_logs_carry_the_request_and_task_spans() {
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args([
        "serve",
        "--demo",
        "--store",
        "memory:",
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ])
    .env("RUST_LOG", "info")
    .stderr(std::process::Stdio::piped());
    let mut server = ServerProcess::spawn(cmd);
    let stderr = server.child.stderr.take().unwrap();
    let cli = Cli::new(&server.url);
    let out = cli.run(&["task", "get", "0123456789abcdef"]);
    assert_ne!(out.status.code(), Some(0));
    let out = cli.run(&["tools", "--no-2026"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = cli.run(&["call", "slow_compute", "seconds=0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The run logs its end right after storing it, which the client may see first.
    std::thread::sleep(Duration::from_millis(500));
    server.child.kill().unwrap();
    let lines: Vec<serde_json::Value> = std::io::BufRead::lines(std::io::BufReader::new(stderr))
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let lookup = lines
        .iter()
        .find(|l| l["fields"]["message"] == "task lookup failed")
        .expect("the failed lookup is logged");
    assert_eq!(lookup["span"]["name"], "request");
    assert_eq!(lookup["span"]["method"], "tasks/get");
    assert_eq!(lookup["span"]["principal"], "anonymous");
    let init = lines
        .iter()
        .find(|l| l["fields"]["message"] == "session initialized")
        .expect("the session is logged");
    assert_eq!(init["span"]["method"], "initialize");
    // The task's own lines carry its span: task id, tool and principal.
    let created = lines
        .iter()
        .find(|l| l["fields"]["message"] == "task created")
        .expect("the task is logged");
    assert_eq!(created["span"]["name"], "request");
    assert_eq!(created["span"]["method"], "tools/call");
    let finished = lines
        .iter()
        .find(|l| l["fields"]["message"] == "task finished")
        .expect("its end is logged");
    assert_eq!(finished["span"]["name"], "task");
    assert_eq!(finished["span"]["task"], created["fields"]["task"]);
    assert_eq!(finished["span"]["tool"], "slow_compute");
    assert_eq!(finished["span"]["principal"], "anonymous");
}

/// A config with keys for alice and for ops, an operator.
fn keys_config(dir: &std::path::Path) -> String {
    let hash = mcp_tasks_server::auth::hash_key;
    let cfg = dir.join("keys.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[auth.keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\n[[auth.keys]]\nprincipal = \"ops\"\nsha256 = \"{}\"\noperator = true\n",
            hash("key-alice"),
            hash("key-ops")
        ),
    )
    .unwrap();
    cfg.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_login_sets_an_http_only_cookie_that_opens_the_api_summary_and_events() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let cfg = keys_config(dir.path());
    let server = ServerProcess::start(&["--demo", "--store", "memory:", "--config", &cfg]);
    let base = base_of(&server.url);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = |key: &'static str| {
        http.post(format!("{base}/admin/login"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "key": key }).to_string())
            .send()
    };
    let refused = login("key-alice").await.unwrap();
    assert_eq!(refused.status(), 403);
    let ok = login("key-ops").await.unwrap();
    assert_eq!(ok.status(), 200);
    let set = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();

    let get = |path: &str| {
        http.get(format!("{base}{path}"))
            .header("cookie", &cookie)
            .send()
    };
    assert_eq!(get("/admin/api/tasks").await.unwrap().status(), 200);
    let no_cookie = http
        .get(format!("{base}/admin/api/tasks"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_cookie.status(), 401);

    // The event stream shows a task as it is created and as it changes.
    let events = get("/admin/api/events").await.unwrap();
    assert_eq!(events.status(), 200);
    let mut body = events.bytes_stream();
    let cli = Cli::new(&server.url);
    let out = cli.run(&["call", "slow_compute", "seconds=1", "--key", "key-alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("\"status\":\"completed\"") {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("task events in time")
            .expect("the stream stays open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: task"), "{seen}");
    assert!(seen.contains("\"tool\":\"slow_compute\""), "{seen}");
    assert!(seen.contains("\"principal\":\"alice\""), "{seen}");

    let summary: serde_json::Value = get("/admin/api/summary")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(summary["lastHour"]["completed"], 1, "{summary}");
    assert_eq!(summary["working"], 0, "{summary}");

    let out = http
        .post(format!("{base}/admin/logout"))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    assert_eq!(
        get("/admin/api/tasks").await.unwrap().status(),
        401,
        "logged out"
    );
}

#[test]
fn the_dashboard_in_headless_chromium_shows_progress_filters_opens_and_cancels() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "Debian's chromium is missing: scripts/test.sh installs it"
    );
    let modules = common::repo_root().join("interop/ui/node_modules/playwright-core");
    assert!(modules.exists(), "interop/ui/node_modules is missing: run `npm ci --prefix interop/ui` (scripts/test.sh does)");
    let dir = tempfile::tempdir().unwrap();
    let cfg = keys_config(dir.path());
    // Webhooks may reach loopback: one goes to a port where nothing listens.
    let keys = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{keys}\n[webhooks]\nallowed_hosts = [\"127.0.0.1\"]\n"),
    )
    .unwrap();
    let keys = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{keys}\n[events]\nallow_insecure_loopback = true\n"),
    )
    .unwrap();
    let server = ServerProcess::start(&["--demo", "--store", "memory:", "--config", &cfg]);
    let cli = Cli::new(&server.url);
    // Alice subscribes to her tasks' ends (an endpoint that answers the challenge); the task
    // below is delivered to it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hook = rt.block_on(challenge_echo());
    let sub = rt.block_on(subscribe(&server.url, "key-alice", &hook));
    let out = cli.run(&["call", "slow_compute", "seconds=1", "--key", "key-alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let nowhere = format!("http://127.0.0.1:{}/hooks", common::free_port());
    let out = cli.run(&[
        "call",
        "slow_compute",
        "seconds=0",
        "--webhook",
        &nowhere,
        "--detach",
        "--key",
        "key-alice",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let hooked = text(&out.stdout).trim().to_string();
    let out = cli.run(&[
        "call",
        "slow_compute",
        "seconds=60",
        "--detach",
        "--key",
        "key-alice",
    ]);
    let id = text(&out.stdout).trim().to_string();
    // A journaled task, running long enough to be rewound from the page.
    let out = cli.run(&[
        "call",
        "pipeline",
        "items=60",
        "seconds_per_item=0.2",
        "--detach",
        "--key",
        "key-alice",
    ]);
    let pipeline = text(&out.stdout).trim().to_string();
    let shot = dir.path().join("dashboard.png");
    let out = std::process::Command::new("node")
        .args([
            "interop/ui/dashboard.mjs",
            &base_of(&server.url),
            "key-ops",
            &id,
            shot.to_str().unwrap(),
            &hooked,
            &sub,
            &pipeline,
        ])
        .current_dir(common::repo_root())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with(" 0 failed"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a screenshot was saved");
    for name in [
        "dashboard-1280",
        "dashboard-1400",
        "dashboard-subscriptions",
    ] {
        let shot = std::fs::read(dir.path().join(format!("{name}.png"))).unwrap();
        assert!(shot.starts_with(b"\x89PNG"), "{name}.png was saved");
        if let Some(keep) = std::env::var_os("MCP_TASKS_KEEP_SCREENSHOTS") {
            std::fs::write(
                std::path::Path::new(&keep).join(format!("{name}.png")),
                shot,
            )
            .unwrap();
        }
    }
    // Keep the picture the README shows current when asked to.
    if std::env::var_os("MCP_TASKS_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(common::repo_root().join("docs/dashboard.png"), png).unwrap();
    }
}

/// A webhook endpoint on 127.0.0.1 that answers an MCP Events verification with its challenge and
/// takes every event (204); its URL. It runs on the runtime that awaited it.
async fn challenge_echo() -> String {
    let app = axum::Router::new().route(
        "/hooks",
        axum::routing::post(|body: axum::body::Bytes| async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if v["type"] == "verification" {
                let answer = serde_json::json!({"challenge": v["challenge"]}).to_string();
                return (axum::http::StatusCode::OK, answer);
            }
            (axum::http::StatusCode::NO_CONTENT, String::new())
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hooks")
}

/// `events/subscribe` to `task.finished` at `hook` (2026-07-28), as the principal of `key`; the
/// subscription's id.
async fn subscribe(url: &str, key: &str, hook: &str) -> String {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "events/subscribe", "params": {
        "name": "task.finished", "arguments": {}, "cursor": null,
        "delivery": {"mode": "webhook", "url": hook, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo="},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        },
    }});
    let r: serde_json::Value = reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "events/subscribe")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("not subscribed: {r}"))
        .to_string()
}

/// A small OTLP/HTTP receiver on loopback: answers every POST with `{}` and hands over each
/// request's path and body.
fn otlp_receiver() -> (String, std::sync::mpsc::Receiver<(String, String)>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut start = String::new();
                    if reader.read_line(&mut start).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = start.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut length = 0usize;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = tx.send((path, String::from_utf8_lossy(&body).into_owned()));
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
                    );
                }
            });
        }
    });
    (url, rx)
}

#[test]
fn spans_are_exported_over_otlp_when_a_collector_is_configured() {
    let (collector, received) = otlp_receiver();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("otlp.toml");
    std::fs::write(
        &cfg,
        format!("[telemetry]\notlp_endpoint = \"{collector}\"\n"),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args([
        "serve",
        "--demo",
        "--store",
        "memory:",
        "--listen",
        "127.0.0.1:0",
        "--config",
        cfg.to_str().unwrap(),
    ])
    .env("RUST_LOG", "info")
    // Export every 200 ms instead of every 5 s.
    .env("OTEL_BSP_SCHEDULE_DELAY", "200");
    let server = ServerProcess::spawn(cmd);
    let cli = Cli::new(&server.url);
    let out = cli.run(&["task", "get", "0123456789abcdef"]);
    assert_ne!(out.status.code(), Some(0));
    let out = cli.run(&["call", "slow_compute", "seconds=0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut bodies = Vec::new();
    let mut spans: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let has = |spans: &[(String, BTreeMap<String, String>)], name: &str, key: &str, value: &str| {
        spans
            .iter()
            .any(|(n, a)| n == name && a.get(key).map(String::as_str) == Some(value))
    };
    // The task span ends, and is exported, when the task does.
    while !(has(&spans, "request", "method", "tasks/get")
        && has(&spans, "task", "tool", "slow_compute"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let (path, body) = received
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no span exported in time; got: {bodies:?}"));
        assert_eq!(path, "/v1/traces");
        spans.extend(otlp_spans(&body));
        bodies.push(body);
    }
    assert!(
        bodies.concat().contains("mcp-tasks"),
        "the service name: {bodies:?}"
    );
    let lookup = spans
        .iter()
        .find(|(n, a)| n == "request" && a["method"] == "tasks/get")
        .unwrap();
    assert_eq!(lookup.1["principal"], "anonymous");
    let (_, task) = spans.iter().find(|(n, _)| n == "task").unwrap();
    assert_eq!(task["principal"], "anonymous");
    assert_eq!(task["task"].len(), 44, "a task id: {task:?}");
    // The call that created it names it too.
    assert!(
        has(&spans, "request", "task", &task["task"]),
        "the tools/call span carries the task id: {spans:?}"
    );
}

/// Each span in an OTLP/HTTP JSON export: its name and its string attributes.
fn otlp_spans(body: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let mut out = Vec::new();
    for rs in v["resourceSpans"].as_array().into_iter().flatten() {
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for span in ss["spans"].as_array().into_iter().flatten() {
                let attributes = span["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| {
                        Some((
                            a["key"].as_str()?.to_string(),
                            a["value"]["stringValue"].as_str()?.to_string(),
                        ))
                    })
                    .collect();
                out.push((span["name"].as_str().unwrap_or("").to_string(), attributes));
            }
        }
    }
    out
}

/// Signals from the admin command: the operator's signal finishes alice's approval_flow (sent by
/// "operator ops"), `admin show` lists it; another principal cannot signal alice's task over MCP
/// (not found), and a finished task refuses more (exit 1, saying why).
#[test]
fn an_operator_signals_a_task_and_show_lists_its_signals() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = keys_config(dir.path());
    let store = format!("sqlite:{}", dir.path().join("tasks.db").display());
    let server = ServerProcess::start(&["--demo", "--store", &store, "--config", &cfg]);
    let base = base_of(&server.url);
    let cli = Cli::new(&server.url);
    let out = cli.run(&[
        "call",
        "approval_flow",
        "sleep_seconds=0",
        "timeout_seconds=60",
        "--detach",
        "--key",
        "key-alice",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let out = cli.run(&["task", "signal", &id, "approve", "1", "--key", "key-ops"]);
    assert_ne!(out.status.code(), Some(0), "another principal's task");
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
    let admin = |args: &[&str]| {
        let mut all = vec!["admin", "--url", &base, "--key", "key-ops"];
        all.extend(args);
        cli.run(&all)
    };
    let out = admin(&["signal", &id, "approve", r#"{"by": "ops"}"#]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{id}  signal approve #1 sent\n"));
    let out = cli.run(&["task", "result", &id, "--key", "key-alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("approved by operator ops with"),
        "{}",
        text(&out.stdout)
    );
    let shown = text(&admin(&["show", &id]).stdout);
    assert!(
        shown.contains("approve  from operator ops, at ") && shown.contains(r#"{"by":"ops"}"#),
        "{shown}"
    );
    let out = admin(&["signal", &id, "approve"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("a finished task takes no signals"),
        "{}",
        text(&out.stderr)
    );
}
