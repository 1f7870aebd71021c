//! OAuth with an official SDK client (issue 14, item 4): `mcp-tasks serve` with `[auth.oauth]` read
//! from a config file, a small authorization server on loopback (the server crate's
//! `tests/support/authz.rs`, with a client-credentials token endpoint), and the TypeScript SDK v1
//! client's `ClientCredentialsProvider` (interop/ts/oauth-interop.mjs): it finds the authorization
//! server from our 401, gets a token and runs a task; it reads our 403 `insufficient_scope` on a tool
//! that needs another scope; and a fresh token with that scope calls it on the same session.

mod common;

#[path = "../../server/tests/support/authz.rs"]
mod authz;

use common::{bin, repo_root, ServerProcess};
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_v1_client_gets_a_token_from_our_401_and_steps_up_after_our_403() {
    assert!(
        repo_root()
            .join("interop/ts/node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "interop/ts/node_modules is missing: run `npm ci --prefix interop/ts` (scripts/test.sh does)"
    );
    let idp = authz::AuthServer::start(&[&authz::Key::fixture("rsa-a", "r1")]).await;
    idp.register("ci-bot", "s3cret", &["tasks", "tasks:deploy"]);
    // The audience is the server's own URL, so its port is chosen first.
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("oauth.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[auth.oauth]
issuer = "{issuer}"
audience = "{url}"

[[tools]]
name = "deploy"
command = ["sh", "-c", "echo deployed $0", "{{service}}"]
scopes = ["tasks:deploy"]
input_schema = {{ type = "object", properties = {{ service = {{ type = "string" }} }} }}
"#,
            issuer = idp.issuer
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--demo", "--store", "memory:", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn");
    let server = ServerProcess::spawn(cmd);
    assert_eq!(server.url, url);

    let out = tokio::process::Command::new("node")
        .args([
            "interop/ts/oauth-interop.mjs",
            &url,
            &idp.issuer,
            "ci-bot",
            "s3cret",
        ])
        .current_dir(repo_root())
        .output()
        .await
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with(" 0 failed"),
        "oauth-interop.mjs failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        idp.issued(),
        [
            ("ci-bot".to_string(), "tasks".to_string()),
            // The SDK's step-up try: it asks for its configured scope again.
            ("ci-bot".to_string(), "tasks".to_string()),
            ("ci-bot".to_string(), "tasks tasks:deploy".to_string()),
        ],
        "a token to start with, the SDK's step-up try, the wider token"
    );
}
