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
