//! Command tools from a TOML config, run by the real binary: argv templating, the stdout line protocol
//! for progress and status, exit codes, timeouts and cancellation of the whole process group.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use serde_json::json;
use std::time::Duration;
use support::Client;

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("tools.toml");
    let pidfile = dir.join("child.pid");
    let ask = dir.join("ask.sh");
    // A question too long to be a directive, then an output line as long (which is plain output).
    let long_ask = dir.join("long-ask.sh");
    std::fs::write(
        &long_ask,
        r#"printf '::ask {"message": "%s"}\n' "$(head -c 100000 /dev/zero | tr '\0' x)"
read answer
echo "answer: $answer"
head -c 100000 /dev/zero | tr '\0' y
echo
"#,
    )
    .unwrap();
    // Progress as fast as a program can print it, with a status now and then.
    let flood = dir.join("flood.sh");
    std::fs::write(
        &flood,
        r#"awk 'BEGIN { for (i = 1; i <= 20000; i++) { print "::progress " i "/20000"; if (i % 5000 == 0) print "::status at " i } }'
echo done
"#,
    )
    .unwrap();
    // Three descendants that a process group does not hold together: a child in the group, one
    // that left it by setsid while its parent lives, and a double-forked daemon (its parent gone);
    // the program ignores SIGTERM, so a stop ends it only by SIGKILL after the grace.
    let family = dir.join("family.sh");
    std::fs::write(
        &family,
        format!(
            r#"d={dir}/$1
trap '' TERM
sleep 300 & echo $! > "$d.kid"
setsid sleep 300 & echo $! > "$d.setsid"
(setsid sleep 300 & echo $! > "$d.daemon")
echo started
while :; do sleep 0.1; done
"#,
            dir = dir.display()
        ),
    )
    .unwrap();
    std::fs::write(
        &ask,
        r#"echo before
echo '::ask {"message": "Go on?", "schema": {"type": "object", "properties": {"go": {"type": "boolean"}}}}'
read answer
echo "answer: $answer"
"#,
    )
    .unwrap();
    std::fs::write(
        &path,
        format!(
            r#"
[tasks]
drain_secs = 1
hand_off_grace_secs = 1

[[tools]]
name = "echo_args"
command = ["sh", "-c", "for a in \"$@\"; do echo \"[$a]\"; done", "sh", "{{first}}", "--n={{n}}", "{{rest}}"]
task_support = "optional"
input_schema = {{ type = "object", properties = {{ first = {{ type = "string" }}, n = {{ type = "integer" }}, rest = {{ type = "array", items = {{ type = "string" }} }} }}, required = ["first"] }}

[[tools]]
name = "steps"
command = ["sh", "-c", "echo '::status warming up'; for i in 1 2 3; do echo \"step $i\"; echo \"::progress $i/3 step $i\"; sleep 0.3; done; echo done >&2"]
task_support = "required"

[[tools]]
name = "exit3"
command = ["sh", "-c", "echo oops; exit 3"]
task_support = "optional"

[[tools]]
name = "too_slow"
command = ["sleep", "30"]
task_support = "optional"
timeout_secs = 1
kill_grace_secs = 1

[[tools]]
name = "stubborn"
command = ["sh", "-c", "trap '' TERM; sleep 300 & echo $! > {pid}; wait"]
task_support = "required"
kill_grace_secs = 1

[[tools]]
name = "confirm_step"
command = ["sh", "{ask}"]
task_support = "required"

[[tools]]
name = "long_ask"
command = ["sh", "{long_ask}"]
task_support = "required"
timeout_secs = 20

[[tools]]
name = "flood"
command = ["sh", "{flood}"]
task_support = "required"

[[tools]]
name = "missing_program"
command = ["/nonexistent/program"]
task_support = "optional"

[[tools]]
name = "family"
command = ["sh", "{family}", "{{tag}}"]
task_support = "required"
kill_grace_secs = 1

[[tools]]
name = "family_patient"
command = ["sh", "{family}", "{{tag}}"]
task_support = "required"
kill_grace_secs = 600

[[tools]]
name = "leaves_a_daemon"
command = ["sh", "-c", "(setsid sleep 300 & echo $! > {daemon_pid}); echo left"]
task_support = "optional"
"#,
            family = family.display(),
            daemon_pid = dir.join("daemon.pid").display(),
            pid = pidfile.display(),
            ask = ask.display(),
            long_ask = long_ask.display(),
            flood = flood.display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_tools_behave_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let server = ServerProcess::start(&["--store", "memory:", "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect(&server.url).await;

    // argv templating: no shell interpretation of the values, arrays expand, absent values vanish.
    let ex = c
        .request("tools/call", json!({"name": "echo_args", "arguments": {"first": "a b; rm -rf /", "n": 7, "rest": ["x", "$HOME"]}}))
        .await;
    let out = ex.result()["structuredContent"]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(out, "[a b; rm -rf /]\n[--n=7]\n[x]\n[$HOME]\n");
    assert_eq!(ex.result()["structuredContent"]["exitCode"], 0);

    // Progress and status lines drive the task; they are not part of the output.
    let mut get = c.open_stream().await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "steps", "arguments": {}, "task": {}, "_meta": {"progressToken": "st"}}),
        )
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    let progress: Vec<f64> = r
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| n["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(
        !progress.is_empty() && progress.windows(2).all(|w| w[0] < w[1]),
        "{progress:?}"
    );
    // The status may go out before tasks/result is open (then on the GET stream): look at both.
    let mut seen = r.notifications.clone();
    while let Ok(n) = get.try_recv() {
        seen.push(n);
    }
    assert!(
        seen.iter()
            .any(|n| n["params"]["statusMessage"] == "warming up"),
        "{seen:?}"
    );
    let res = r.result();
    assert_eq!(
        res["structuredContent"]["stdout"],
        "step 1\nstep 2\nstep 3\n"
    );
    assert_eq!(res["structuredContent"]["stderr"], "done\n");
    let t = c.get_task(&id).await;
    assert_eq!(
        (t["progress"].as_f64(), t["progressTotal"].as_f64()),
        (Some(3.0), Some(3.0))
    );

    // A non-zero exit is a tool error.
    let ex = c
        .request("tools/call", json!({"name": "exit3", "arguments": {}}))
        .await;
    assert_eq!(ex.result()["isError"], json!(true));
    assert_eq!(ex.result()["structuredContent"]["exitCode"], 3);
    assert!(ex.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("exit status: 3"));

    // Timeouts stop the program and say so.
    let ex = c
        .request("tools/call", json!({"name": "too_slow", "arguments": {}}))
        .await;
    assert_eq!(ex.result()["isError"], json!(true));
    assert!(ex.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("timed out"));

    // A program that cannot start is a tool error naming it.
    let ex = c
        .request(
            "tools/call",
            json!({"name": "missing_program", "arguments": {}}),
        )
        .await;
    assert_eq!(ex.result()["isError"], json!(true));
    assert!(ex.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/program"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_whole_process_group_even_when_it_ignores_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let server = ServerProcess::start(&["--store", "memory:", "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect(&server.url).await;
    let id = c.create_task("stubborn", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let pidfile = dir.path().join("child.pid");
    assert!(common::eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty())
    }));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = |pid: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    assert!(alive(pid));
    let r = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r.result()["status"], "cancelled");
    // SIGTERM is ignored, so SIGKILL follows after the 1 s grace and takes the grandchild with it.
    assert!(
        common::eventually(Duration::from_secs(6), || !alive(pid)),
        "grandchild {pid} still alive"
    );
    drop(server);
}

/// A server with the config's tools, a client that can answer elicitations, and a task of `tool`
/// it started (the folder and the server live as long as the caller holds them).
async fn start_asking(tool: &str) -> (tempfile::TempDir, ServerProcess, Client, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let server = ServerProcess::start(&["--store", "memory:", "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect_caps(&server.url, json!({"elicitation": {}})).await;
    let id = c.create_task(tool, json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    (dir, server, c, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_tool_can_ask_and_read_the_answer_on_stdin() {
    let (_dir, _server, mut c, id) = start_asking("confirm_step").await;
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let req = loop {
        let m = support::next_msg(&mut stream).await;
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    assert_eq!(req["params"]["message"], "Go on?");
    assert_eq!(
        c.respond(
            &req["id"],
            json!({"action": "accept", "content": {"go": true}})
        )
        .await
        .0,
        202
    );
    let done = loop {
        let m = support::next_msg(&mut stream).await;
        if m.get("method").is_none() {
            break m;
        }
    };
    let out = done["result"]["structuredContent"]["stdout"]
        .as_str()
        .unwrap();
    assert_eq!(
        out,
        "before\nanswer: {\"action\":\"accept\",\"content\":{\"go\":true}}\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directive_too_long_fails_its_question_with_the_reason_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let _server = ServerProcess::start(&["--store", "memory:", "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect_caps(&_server.url, json!({"elicitation": {}})).await;
    // The warning goes out as soon as the program prints the line, which may be before tasks/result
    // is open: with the session's GET stream open first, it has a stream to go to either way.
    let mut standalone = c.open_stream().await;
    let id = c.create_task("long_ask", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let started = std::time::Instant::now();
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    // Before, the line was split and ignored, and the program waited on stdin until its timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let res = r.result();
    assert_ne!(res["isError"], json!(true), "the program ended normally");
    let out = res["structuredContent"]["stdout"].as_str().unwrap();
    let (answer, rest) = out.split_once('\n').unwrap();
    let answer: serde_json::Value =
        serde_json::from_str(answer.strip_prefix("answer: ").unwrap()).unwrap();
    assert_eq!(answer["action"], "cancel");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("::ask line is longer than 65536 bytes"),
        "{answer}"
    );
    // A long line that is not a directive is output, whole.
    assert_eq!(rest, format!("{}\n", "y".repeat(100_000)));
    // The client was told too, on the task's stream or the session's.
    let mut told = r.notifications.clone();
    while let Ok(Some(m)) =
        tokio::time::timeout(Duration::from_millis(300), standalone.recv()).await
    {
        told.push(m);
    }
    assert!(
        told.iter().any(|n| n["method"] == "notifications/message"
            && n["params"]["data"]
                .as_str()
                .is_some_and(|d| d.contains("longer than 65536 bytes"))),
        "no warning among {} messages",
        told.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_progress_lines_is_coalesced_and_the_last_report_wins() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let db = dir.path().join("tasks.db");
    let store = format!("sqlite://{}", db.display());
    let server = ServerProcess::start(&["--store", &store, "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect(&server.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "flood", "arguments": {}, "task": {}, "_meta": {"progressToken": "f"}}),
        )
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r.result()["structuredContent"]["stdout"], "done\n");
    let t = c.get_task(&id).await;
    assert_eq!(
        (t["progress"].as_f64(), t["progressTotal"].as_f64()),
        (Some(20000.0), Some(20000.0)),
        "the last report is the task's progress: {t}"
    );
    let progress: Vec<f64> = r
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| n["params"]["progress"].as_f64().unwrap())
        .collect();
    // 20,000 lines, a report applied at most every 100 ms: far fewer writes and notifications.
    assert!(
        !progress.is_empty() && progress.len() < 2000,
        "{} progress notifications",
        progress.len()
    );
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    let history: Vec<String> = rusqlite::Connection::open(&db)
        .unwrap()
        .prepare(
            "SELECT coalesce(json_extract(h.value, '$.message'), '') \
             FROM tasks, json_each(tasks.history) AS h WHERE tasks.id = ?1",
        )
        .unwrap()
        .query_map([&id], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(history.len() < 100, "{history:?}");
}

/// The pids a `family` task `tag` wrote, once it wrote all three.
fn family_pids(dir: &std::path::Path, tag: &str) -> Vec<i32> {
    let read = || -> Option<Vec<i32>> {
        ["kid", "setsid", "daemon"]
            .iter()
            .map(|k| {
                std::fs::read_to_string(dir.join(format!("{tag}.{k}")))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect()
    };
    assert!(
        common::eventually(Duration::from_secs(5), || read().is_some()),
        "the family of {tag} did not start"
    );
    read().unwrap()
}

fn alive(pid: i32) -> bool {
    // A zombie is gone for this purpose: it runs nothing and waits only for its parent.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_a_command_started_outlives_a_cancel_an_exit_or_a_killed_server() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let server = ServerProcess::start(&["--store", "memory:", "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect(&server.url).await;
    // A cancel: the group gets SIGTERM, ignored, then SIGKILL after the grace; the two that left
    // the group go too.
    let id = c.create_task("family", json!({"tag": "cancelled"})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let pids = family_pids(dir.path(), "cancelled");
    assert!(pids.iter().all(|&p| alive(p)));
    let r = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r.result()["status"], "cancelled");
    assert!(
        common::eventually(Duration::from_secs(6), || pids.iter().all(|&p| !alive(p))),
        "after a cancel, alive: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
    // A program that exits, leaving a daemon behind: the daemon goes with the run.
    let done = c
        .request(
            "tools/call",
            json!({"name": "leaves_a_daemon", "arguments": {}}),
        )
        .await;
    assert_eq!(done.result()["isError"], json!(null), "{done:?}");
    let daemon: i32 = std::fs::read_to_string(dir.path().join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || !alive(daemon)),
        "the daemon {daemon} outlived its run"
    );
    // A run dropped when its server stops (SIGTERM; the program's grace is longer than the
    // server's stop): the tree goes with it.
    c.create_task("family_patient", json!({"tag": "dropped"}))
        .await;
    let pids = family_pids(dir.path(), "dropped");
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut server = server;
    assert!(
        common::eventually(Duration::from_secs(40), || server
            .child
            .try_wait()
            .unwrap()
            .is_some()),
        "the server did not stop"
    );
    assert!(
        common::eventually(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p))),
        "after the server's stop, alive: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
    // The server killed with SIGKILL: nobody is left to signal the group, but all three go.
    let server = ServerProcess::start(&["--store", "memory:", "--config", cfg.to_str().unwrap()]);
    let mut c = Client::connect(&server.url).await;
    c.create_task("family", json!({"tag": "orphaned"})).await;
    let pids = family_pids(dir.path(), "orphaned");
    server.kill9();
    assert!(
        common::eventually(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p))),
        "after the server's SIGKILL, alive: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
}
