//! The load generator's smoke run (bench/smoke.sh) against a jobyard it starts: a few
//! thousand jobs per workload on loopback; counts are checked, never timings.

use std::path::Path;
use std::process::Command;

#[test]
fn load_generator_smoke_run_against_jobyard() {
    let bench = Path::new(env!("CARGO_BIN_EXE_jobyard-bench"));
    let bin_dir = bench.parent().expect("binary directory");
    let jobyard = bin_dir.join("jobyard");
    assert!(
        jobyard.exists(),
        "{} is missing: build the server first (cargo build -p jobyard)",
        jobyard.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/smoke.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--bin-dir")
        .arg(bin_dir)
        .output()
        .expect("run bash bench/smoke.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "bench/smoke.sh failed:\n{text}");
    assert!(text.contains("smoke: all checks passed"), "{text}");
}

/// The floor responder serves every beanstalkd workload of the load generator: the jobs
/// put are the jobs drained, and a blocking reserve is answered when a job arrives.
#[test]
fn the_floor_serves_the_beanstalk_workloads() {
    floor_serves_the_workloads(&[]);
}

/// The same of the floor on a tokio runtime, with its stand-in work per request.
#[test]
fn the_tokio_floor_serves_the_beanstalk_workloads() {
    floor_serves_the_workloads(&["--tokio", "--work-us", "1"]);
}

fn floor_serves_the_workloads(options: &[&str]) {
    use std::io::{BufRead, BufReader};
    let bench = env!("CARGO_BIN_EXE_jobyard-bench");
    let mut floor = Command::new(bench)
        .args(["floor", "--listen", "127.0.0.1:0"])
        .args(options)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the floor");
    let mut first = String::new();
    BufReader::new(floor.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first.trim().rsplit(' ').next().unwrap().to_string();
    let run = |args: &[&str]| {
        let out = Command::new(bench)
            .args(["beanstalk"])
            .args(args)
            .args(["--addr", &addr, "--json"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let field = |k: &str| -> f64 {
            let at = text.find(&format!("\"{k}\":")).expect(k) + k.len() + 3;
            text[at..]
                .split([',', '}'])
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        (field("jobs"), field("errors"))
    };
    assert_eq!(run(&["drain", "--count", "3000"]), (3000.0, 0.0));
    let (jobs, errors) = run(&["e2e", "--duration", "1", "--rate", "500"]);
    assert!(
        jobs > 0.0 && errors == 0.0,
        "e2e: {jobs} jobs, {errors} errors"
    );
    let _ = floor.kill();
    let _ = floor.wait();
}
