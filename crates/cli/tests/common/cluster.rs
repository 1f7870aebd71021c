//! Three `mcp-tasks serve` replicas on one PostgreSQL schema behind a real nginx (Debian's package,
//! installed by `scripts/test.sh`) that round-robins every request with no stickiness: what an
//! operator runs past one machine (examples/nginx-replicas.conf), on loopback ports of the test's own.

use super::pg::FreshSchema;
use super::{free_port, is_root, repo_root, ServerProcess};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Each replica's connection pool: three replicas per test, several tests at once, on a server with
/// 100 connections.
const POOL: usize = 6;

/// Replicas behind nginx on a fresh PostgreSQL schema. Everything is killed on drop; call
/// [`Cluster::finish`] to drop the schema as well.
pub struct Cluster {
    /// The replicas, in nginx's upstream order; `None` once killed.
    pub replicas: Vec<Option<ServerProcess>>,
    /// The balancer's `/mcp` URL.
    pub url: String,
    /// The schema's store URL (what the replicas were given).
    pub store: String,
    /// Each replica's `application_name`, to find its PostgreSQL connections.
    pub app_names: Vec<String>,
    pub pg: FreshSchema,
    nginx: Child,
    finished: bool,
    /// The config file and nginx's working directory.
    pub dir: tempfile::TempDir,
}

/// Stops nginx: SIGTERM to its master, which takes its workers down with it (a SIGKILL would leave
/// the workers running, holding the port); SIGKILL only if it has not gone within 5 s.
pub fn stop_nginx(nginx: &mut Child) {
    if let Ok(Some(_)) = nginx.try_wait() {
        return;
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(nginx.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = nginx.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = nginx.kill();
    let _ = nginx.wait();
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop_nginx(&mut self.nginx);
        if !self.finished {
            // A failed test: drop the schema all the same (from a thread of its own: this may run
            // inside the test's runtime, which cannot be blocked on).
            for r in &mut self.replicas {
                r.take();
            }
            let name = self.pg.name.clone();
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    if let Ok((client, conn)) =
                        tokio_postgres::connect(&super::pg::test_url(), tokio_postgres::NoTls).await
                    {
                        tokio::spawn(conn);
                        let _ = client
                            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                            .await;
                    }
                });
            })
            .join();
        }
    }
}

/// The nginx binary (PATH, then Debian's location, which is not on every user's PATH).
pub fn nginx_bin() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join("nginx");
        if p.exists() {
            return p;
        }
    }
    let p = PathBuf::from("/usr/sbin/nginx");
    assert!(
        p.exists(),
        "nginx is missing: scripts/test.sh installs Debian's nginx-light (apt-get install nginx-light)"
    );
    p
}

fn port_of(url: &str) -> u16 {
    let rest = url
        .strip_prefix("http://127.0.0.1:")
        .expect("a loopback URL");
    rest.split('/').next().unwrap().parse().expect("a port")
}

impl Cluster {
    /// Starts `n` replicas with `config` (TOML, may be empty) plus `--demo`, and nginx in front.
    pub async fn start(tag: &str, n: usize, config: &str) -> Cluster {
        let pg = FreshSchema::new(tag).await;
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("replica.toml");
        let secret = "request_state_secret = \"cluster-test-secret-shared-by-every-replica\"\n";
        let config = if config.contains("[server]") {
            config.replacen("[server]\n", &format!("[server]\n{secret}"), 1)
        } else {
            format!("[server]\n{secret}\n{config}")
        };
        std::fs::write(&config_path, config).unwrap();
        let mut replicas = Vec::new();
        let mut app_names = Vec::new();
        for i in 0..n {
            let app = format!(
                "mcp-tasks-{tag}-{i}-{}",
                &mcp_tasks_engine::random_id()[..6]
            );
            let store = format!("{}&application_name={app}&pool_max_conns={POOL}", pg.url);
            replicas.push(Some(ServerProcess::start(&[
                "--demo",
                "--store",
                &store,
                "--config",
                config_path.to_str().unwrap(),
            ])));
            app_names.push(app);
        }
        let ports: Vec<u16> = replicas
            .iter()
            .map(|r| port_of(&r.as_ref().unwrap().url))
            .collect();
        let (nginx, port) = start_nginx(dir.path(), &ports);
        Cluster {
            replicas,
            url: format!("http://127.0.0.1:{port}/mcp"),
            store: pg.url.clone(),
            app_names,
            pg,
            nginx,
            finished: false,
            dir,
        }
    }

    /// Kills replica `i` with SIGKILL, as a crash would.
    pub fn kill9(&mut self, i: usize) {
        if let Some(r) = self.replicas[i].take() {
            r.kill9();
        }
    }

    /// Stops everything and drops the schema.
    pub async fn finish(mut self) {
        for r in &mut self.replicas {
            r.take();
        }
        stop_nginx(&mut self.nginx);
        self.pg.drop_schema().await;
        self.finished = true;
    }
}

/// Writes an nginx config for `ports` (the shape of examples/nginx-replicas.conf, with paths of the
/// test's own) and starts nginx in the foreground on a free port; retries when another process took
/// the port in between.
pub fn start_nginx(dir: &Path, ports: &[u16]) -> (Child, u16) {
    let servers: String = ports
        .iter()
        .map(|p| format!("        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n"))
        .collect();
    // Run as root (CI containers), nginx would hand its workers to `nobody`, who cannot write here.
    let user = if is_root() { "user root;\n" } else { "" };
    for _ in 0..5 {
        let port = free_port();
        let conf = format!(
            r#"{user}worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream mcp_tasks {{
{servers}        keepalive 32;
        keepalive_timeout 50s;
    }}
    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_buffering off;
        proxy_cache off;
        proxy_read_timeout 1h;
        proxy_send_timeout 1h;
        location /mcp {{
            proxy_pass http://mcp_tasks;
            proxy_next_upstream error timeout;
            proxy_intercept_errors on;
            error_page 503 = @stopping;
        }}
        location @stopping {{
            proxy_pass http://mcp_tasks;
            proxy_next_upstream http_503 non_idempotent;
        }}
    }}
}}
"#,
            dir = dir.display()
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let mut child = Command::new(nginx_bin())
            .args(["-e", "stderr", "-p"])
            .arg(dir)
            .arg("-c")
            .arg(&path)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = child.try_wait() {
                break; // the port was taken, or the config is wrong: error.log says which
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop_nginx(&mut child);
        eprintln!(
            "nginx did not start on port {port}: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
    }
    panic!("nginx did not start (see its error.log above)");
}

/// Runs an interop script (`program script args…`) and asserts its `N passed, 0 failed` summary.
pub fn run_script(program: &Path, script: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .arg(script)
        .args(args)
        .current_dir(repo_root())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        out.status.success() && summary.ends_with(" 0 failed"),
        "{script} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}
