//! jobctl against a real worker and master: commands, output, errors and exit codes.

mod common;

use common::*;
use jobyard_jobd::config::MasterConfig;
use jobyard_jobd::jobctl::{run_command, Endpoint};
use jobyard_jobd::{start_jobd, start_master};

/// A worker's (or with `master`, a master's) endpoint on this machine.
fn endpoint(master: bool, port: u16, password: Option<&str>) -> Endpoint {
    Endpoint {
        master,
        host: "127.0.0.1".into(),
        port,
        password: password.map(str::to_string),
    }
}

async fn run(endpoint: &Endpoint, command: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let args: Vec<String> = command[1..].iter().map(|s| s.to_string()).collect();
    let code = run_command(endpoint, command[0], &args, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[tokio::test]
async fn worker_commands() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(
        &db,
        &jobs,
        "t1 = 2\nt2 = 1\n",
        "password = pw\n",
    ))
    .await
    .unwrap();
    let worker = &endpoint(false, w.addr.port(), Some("pw"));
    let (code, out, err) = run(worker, &["list-targets"]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(" TARGET | CONCURRENCY | LENGTH | PAUSED"),
        "{out}"
    );
    assert!(out.contains(" t1     | 2           | 0      | no"), "{out}");
    let (code, out, _) = run(worker, &["pause", "t2"]).await;
    assert_eq!((code, out.as_str()), (0, "ok\n"));
    let (_, out, _) = run(worker, &["list-targets"]).await;
    assert!(
        out.contains(" t2     | 1           | 0      | yes"),
        "{out}"
    );
    let (code, out, _) = run(worker, &["memory-usage"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("rss") && out.contains("pendingJobPromises"),
        "{out}"
    );
    let (code, out, _) = run(worker, &["set-target-concurrency", "t1", "5"]).await;
    assert_eq!((code, out.as_str()), (0, "ok\n"));
    // Server errors: printed, exit 0 (as jobctl does).
    let (code, out, err) = run(worker, &["poll", "nope"]).await;
    assert_eq!((code, out.as_str()), (0, ""));
    assert_eq!(err, "ERROR [jobctl] Worker error: invalid target 'nope'\n");
    let (code, _, err) = run(worker, &["poll"]).await;
    assert_eq!(
        (code, err.as_str()),
        (1, "ERROR [jobctl] No targets specified.\n")
    );
    let (code, _, err) = run(worker, &["frobnicate"]).await;
    assert_eq!(
        (code, err.as_str()),
        (1, "ERROR [jobctl] Unsupported command: 'frobnicate'\n")
    );
    // Without the password: an error.
    let (code, _, err) = run(&endpoint(false, w.addr.port(), None), &["list-targets"]).await;
    assert_eq!(code, 0);
    assert!(err.contains("invalid password"), "{err}");
    // New commands: run-manual and send-signal.
    let id = db.insert("t1", "manual").await;
    let (code, out, _) = run(worker, &["run-manual", &id.to_string()]).await;
    assert_eq!(code, 0);
    assert!(out.contains("\"result\": \"ok\""), "{out}");
    let (code, out, _) = run(worker, &["send-signal", "12345", "SIGTERM"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("\"12345\": false"), "{out}");
    w.shutdown().await;
}

#[tokio::test]
async fn master_commands_and_connection_failure() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = start_master(MasterConfig::parse("host = 127.0.0.1\nport = 0\n").unwrap())
        .await
        .unwrap();
    let mut cfg = worker_config(&db, &jobs, "a = 3\n", "");
    cfg.name = "alpha".into();
    cfg.master = Some(("127.0.0.1".into(), m.addr.port()));
    let w = start_jobd(cfg).await.unwrap();
    let master = &endpoint(true, m.addr.port(), None);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, out, _) = run(master, &["list-workers"]).await;
        if out.contains("alpha") {
            assert!(out.lines().next().unwrap().starts_with(" WORKER"), "{out}");
            assert!(out.contains("(127.0.0.1)"), "{out}");
            assert!(out.contains("| a "), "{out}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for cmd in [vec!["poke", "a"], vec!["pause", "a"], vec!["continue"]] {
        let (code, out, err) = run(master, &cmd).await;
        assert_eq!((code, out.as_str()), (0, "ok\n"), "{cmd:?} {err}");
    }
    let (code, out, _) = run(master, &["memory-usage"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("rss") && !out.contains("pendingJobPromises"));
    w.shutdown().await;
    m.shutdown().await;
    let (code, _, err) = run(master, &["list-workers"]).await;
    assert_eq!(code, 1);
    // (Normally "cannot connect …: Connection refused"; on a busy machine another process
    // may grab the freed port, so only the error form is checked.)
    assert!(err.starts_with("ERROR [jobctl] "), "{err}");
}
