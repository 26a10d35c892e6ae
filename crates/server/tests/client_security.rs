//! The Rust client SDK (crates/client) against a secured server: `serve` with a token file
//! (a read and an admin token) and HTTPS with a certificate signed by a CA made here with
//! the openssl CLI, as docs/security.md shows. A read token looks but cannot put, an admin
//! token does both, a wrong token and an untrusted certificate fail with clear errors.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, Server};
use jobyard_client::{Client, Error};

const ADMIN: &str = "admin-token-0123456789abcdef";
const READ: &str = "read-token-0123456789abcdef";

/// A running server speaking HTTPS with tokens, and what a client needs to reach it.
struct Secured {
    _server: Server,
    url: String,
    ca: PathBuf,
    dir: tempfile::TempDir,
}

impl Secured {
    fn client(&self, token: &str) -> Client {
        Client::builder()
            .url(&self.url)
            .token(token)
            .ca_file(&self.ca)
            .build()
            .expect("client")
    }
}

/// Runs the openssl CLI; panics with its output if it fails.
fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name` in `dir`: (certificate, key).
fn make_ca(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (ca, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    let subject = format!("/CN=jobyard test {name}");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        s(&key),
        "-out",
        s(&ca),
        "-days",
        "2",
        "-subj",
        &subject,
    ]);
    (ca, key)
}

/// A server certificate for 127.0.0.1 signed by the CA: (certificate, key).
fn make_server_cert(dir: &Path, ca: &Path, ca_key: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let (csr, ext) = (dir.join("req.pem"), dir.join("ext.cnf"));
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write ext.cnf");
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        s(&key),
        "-out",
        s(&csr),
        "-subj",
        "/CN=jobyard test",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        s(&csr),
        "-CA",
        s(ca),
        "-CAkey",
        s(ca_key),
        "-CAcreateserial",
        "-out",
        s(&cert),
        "-days",
        "2",
        "-extfile",
        s(&ext),
    ]);
    (cert, key)
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `serve` with the HTTP listener on HTTPS, requiring the two tokens.
fn start_secured() -> Secured {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, ca_key) = make_ca(dir.path(), "ca");
    let (cert, key) = make_server_cert(dir.path(), &ca, &ca_key);
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("admin {ADMIN}\nread {READ}\n")).expect("token file");
    let data = dir.path().join("data");
    let http_port = free_port();
    let server = Server::serve(
        &data,
        &[
            "--http-listen",
            &format!("127.0.0.1:{http_port}"),
            "--http-token-file",
            s(&tokens),
            "--http-tls-cert",
            s(&cert),
            "--http-tls-key",
            s(&key),
        ],
    );
    Secured {
        _server: server,
        url: format!("https://127.0.0.1:{http_port}"),
        ca,
        dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_puts_and_reads_over_https() {
    let secured = start_secured();
    let admin = secured.client(ADMIN);
    let id = admin.put("secure", "over tls").await.expect("admin put");
    let job = admin.job(id).await.expect("read").expect("job exists");
    assert_eq!(job["state"], "ready");
    assert!(admin.delete(id).await.expect("admin delete"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_looks_but_cannot_put() {
    let secured = start_secured();
    let id = secured
        .client(ADMIN)
        .put("looked-at", "x")
        .await
        .expect("put");
    let read = secured.client(READ);
    assert!(read.job(id).await.expect("read a job").is_some());
    assert_eq!(read.queue("looked-at").await.expect("counts")["ready"], 1);
    let refused = read
        .put("looked-at", "y")
        .await
        .expect_err("a read token put");
    assert!(
        matches!(&refused, Error::Api { status: 403, code, .. } if code == "forbidden"),
        "{refused:?}"
    );
    assert!(!refused.is_transient());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_refused_clearly() {
    let secured = start_secured();
    let wrong = secured.client("not-a-configured-token-000");
    let refused = wrong.health().await.expect_err("a wrong token");
    assert_eq!(refused.code(), Some("bad_token"), "{refused:?}");
    assert!(refused.to_string().contains("401 bad_token"), "{refused}");
    let nothing = Client::builder()
        .url(&secured.url)
        .ca_file(&secured.ca)
        .token("")
        .build()
        .expect("client");
    let refused = nothing.health().await.expect_err("no token");
    assert_eq!(refused.code(), Some("auth_required"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_a_tls_error() {
    let secured = start_secured();
    let (other_ca, _) = make_ca(secured.dir.path(), "other-ca");
    let untrusting = Client::builder()
        .url(&secured.url)
        .token(ADMIN)
        .ca_file(&other_ca)
        .build()
        .expect("client");
    let failed = tokio::time::timeout(Duration::from_secs(30), untrusting.health())
        .await
        .expect("the handshake ends")
        .expect_err("an untrusted certificate");
    assert!(
        matches!(&failed, Error::Tls(m) if m.contains("certificate")),
        "{failed:?}"
    );
    assert!(!failed.is_transient());
    // The server still serves those who trust it.
    secured.client(READ).health().await.expect("health");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_reads_what_it_is_not_given_from_the_environment() {
    let secured = start_secured();
    // This is the only test of this file that sets JOBYARD_* variables; the servers the
    // others start are spawned with every JOBYARD_* variable removed.
    std::env::set_var("JOBYARD_URL", &secured.url);
    std::env::set_var("JOBYARD_TOKEN", READ);
    std::env::set_var("JOBYARD_CA_CERT", &secured.ca);
    let from_env = Client::from_env();
    let explicit_token = Client::builder().token(ADMIN).build();
    let bare = Client::new(&secured.url);
    for name in ["JOBYARD_URL", "JOBYARD_TOKEN", "JOBYARD_CA_CERT"] {
        std::env::remove_var(name);
    }
    let read = from_env.expect("client from the environment");
    read.health()
        .await
        .expect("the read token and the CA came from the environment");
    let refused = read.put("env", "x").await.expect_err("read token");
    assert_eq!(refused.code(), Some("forbidden"));
    let admin = explicit_token.expect("client");
    admin.put("env", "x").await.expect("the given token wins");
    // `Client::new` reads nothing: the platform's roots (if the machine has any) do not
    // know the test CA.
    match bare {
        Err(Error::Config(_)) => {}
        Ok(bare) => assert!(
            matches!(bare.health().await, Err(Error::Tls(_))),
            "Client::new must not take the CA from the environment"
        ),
        Err(e) => panic!("Client::new: {e:?}"),
    }
}
