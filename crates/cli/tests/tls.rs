//! HTTPS on the way out (issue 14): `mcp-tasks serve` reads an OAuth issuer's metadata and key set
//! over https, `mcp-tasks call` talks to an https endpoint, and the gateway fronts an https upstream.
//! Certificates are checked against the platform's trust store, which `SSL_CERT_FILE` replaces (how
//! an operator trusts a private CA). Each https endpoint here is a TLS front on loopback (a
//! certificate for 127.0.0.1 from the test CA in `tests/fixtures/tls`) before a plain HTTP server;
//! under an unrelated CA each of them is refused, and the message names the certificate.

mod common;

#[path = "../../server/tests/support/authz.rs"]
mod authz;

use common::{bin, free_port, serve_command, text, ClientCli, ServerProcess};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/tls/{name}"))
}

/// The trust store of the cases that must work: the CA that signed the fronts' certificate.
fn trusted() -> PathBuf {
    fixture("ca.pem")
}

/// The trust store of the cases that must fail: a CA that signed nothing here.
fn untrusted() -> PathBuf {
    fixture("other-ca.pem")
}

/// A TLS front on a loopback port: it completes the handshake with the test certificate and relays
/// the plain bytes to `backend`. Counts the handshakes that succeeded, so a test can tell that the
/// traffic went through TLS.
struct TlsFront {
    url: String,
    handshakes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsFront {
    /// A front for the plain server at `backend_url` (`http://127.0.0.1:PORT/...`); its `url` is
    /// the same with `https` and the front's port.
    async fn start(backend_url: &str) -> TlsFront {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let rest = backend_url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let backend: SocketAddr = authority.parse().unwrap();
        let certs = CertificateDer::pem_file_iter(fixture("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}{path}", listener.local_addr().unwrap());
        let handshakes = Arc::new(AtomicUsize::new(0));
        let done = handshakes.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to relay.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    done.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        TlsFront {
            url,
            handshakes,
            task,
        }
    }

    fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}

/// `mcp-tasks serve --demo` on a loopback port with `config`, trusting `ca`, its log in a file.
fn serve(
    config: &std::path::Path,
    port: u16,
    ca: &std::path::Path,
    log: &std::path::Path,
) -> ServerProcess {
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--demo", "--store", "memory:", "--config"])
        .arg(config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .env("SSL_CERT_FILE", ca)
        .env_remove("SSL_CERT_DIR")
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()));
    ServerProcess::spawn(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_https_issuer_is_discovered_and_its_tokens_accepted_and_refused_under_another_ca() {
    let key = authz::Key::fixture("rsa-a", "r1");
    let idp = authz::AuthServer::start(&[&key]).await;
    // The issuer is the https front: its metadata is read over TLS (RFC 8414 discovery).
    let front = TlsFront::start(&format!("{}/", idp.issuer)).await;
    let issuer = front.url.trim_end_matches('/').to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("oauth.toml");
    for (ca, works) in [(trusted(), true), (untrusted(), false)] {
        let port = free_port();
        let audience = format!("http://127.0.0.1:{port}/mcp");
        std::fs::write(
            &config,
            format!("[auth.oauth]\nissuer = \"{issuer}\"\naudience = \"{audience}\"\n"),
        )
        .unwrap();
        let log = dir.path().join(format!("serve-{works}.log"));
        let server = serve(&config, port, &ca, &log);
        let mut claims = idp.claims("alice", &audience, "");
        claims.insert("iss".into(), serde_json::json!(issuer));
        let token = authz::sign(&key, "at+jwt", &claims);
        let cli = ClientCli::new(&server.url);
        let out = cli.run(&["call", "--key", &token, "greet", "name=tls"]);
        if works {
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            assert!(text(&out.stdout).contains("tls"), "{}", text(&out.stdout));
            assert!(front.handshakes() >= 1, "the metadata was read through TLS");
        } else {
            // The token is not at fault: the server cannot check it now (503), and its log says
            // why: the issuer's certificate.
            assert_ne!(out.status.code(), Some(0));
            let err = text(&out.stderr);
            assert!(err.contains("try again later"), "{err}");
            let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
            common::eventually(Duration::from_secs(30), || {
                read_log().contains("certificate")
            });
            let logged = read_log();
            assert!(
                logged.contains("cannot read the OAuth issuer's key set")
                    && logged.contains(&format!(
                        "{}/.well-known/oauth-authorization-server",
                        issuer
                    ))
                    && logged.to_lowercase().contains("certificate"),
                "{logged}"
            );
        }
        drop(server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_calls_an_https_endpoint_and_refuses_a_certificate_it_cannot_verify() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let front = TlsFront::start(&server.url).await;
    let cli = ClientCli::new(&front.url);
    let run = |ca: PathBuf| {
        let mut cmd = cli.cmd(&["call", "slow_compute", "seconds=0", "label=tls"]);
        cmd.env("SSL_CERT_FILE", ca)
            .env_remove("SSL_CERT_DIR")
            .env_remove("RUST_LOG");
        common::output_within(&mut cmd, Duration::from_secs(60))
    };
    let out = run(trusted());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "slow_compute (tls) finished after 0 seconds\n"
    );
    assert!(front.handshakes() >= 1);

    let before = front.handshakes();
    let out = run(untrusted());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot talk MCP with {}", front.url))
            && err.to_lowercase().contains("certificate"),
        "{err}"
    );
    // Said once, by us: not also by the verifier's own log line.
    assert!(!err.contains("rustls_platform_verifier"), "{err}");
    assert_eq!(front.handshakes(), before, "no handshake completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateway_fronts_an_https_upstream() {
    let upstream = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let front = TlsFront::start(&upstream.url).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstreams]]\nname = \"secure\"\nurl = \"{}\"\ntools = [\"greet\"]\nprefix = \"up\"\n",
            front.url
        ),
    )
    .unwrap();
    let log = dir.path().join("gateway.log");
    let gateway = serve(&config, free_port(), &trusted(), &log);
    let cli = ClientCli::new(&gateway.url);
    let out = cli.run(&["call", "up_greet", "name=gateway"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("gateway"),
        "{}",
        text(&out.stdout)
    );
    assert!(front.handshakes() >= 1);
    drop(gateway);

    // Under a CA that did not sign the upstream's certificate the gateway does not start, and says
    // which upstream and why.
    let out = serve_command(&["--store", "memory:", "--config", config.to_str().unwrap()])
        .env("SSL_CERT_FILE", untrusted())
        .env_remove("SSL_CERT_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("error: upstream \"secure\": ") && err.to_lowercase().contains("certificate"),
        "{err}"
    );
}
