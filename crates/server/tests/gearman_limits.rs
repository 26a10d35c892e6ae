//! Memory a Gearman client controls is bounded: a foreground client that stops reading
//! while its job streams WORK_DATA is cut off instead of buffered for without limit.

mod gearman_common;

use gearman_common::{t, GServer};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_client_that_stops_reading_is_disconnected_not_buffered_for() {
    let s = GServer::start(&["--gearman-max-packet", "2000000"]);
    let mut w = s.gear();
    let mut c = s.gear();
    w.can_do("stream");
    let h = c.submit(t::SUBMIT_JOB, "stream", "", b"go");
    w.grab().expect("job");
    let before = rss_kib(s.pid());
    // 64 MiB of WORK_DATA for a client that reads none of it (the cap is 16 MiB; the
    // kernel's socket buffers hold a few more).
    let chunk = vec![b'd'; 1 << 20];
    for _ in 0..64 {
        w.send(t::WORK_DATA, &[h.as_bytes(), &chunk]);
    }
    w.send(t::WORK_COMPLETE, &[h.as_bytes(), b"done"]);
    w.barrier();
    let grown_mib = rss_kib(s.pid()).saturating_sub(before) / 1024;
    assert!(
        grown_mib < 48,
        "server grew by {grown_mib} MiB for a client that does not read"
    );
    // The client was cut off: what reached it ends in EOF (possibly mid-packet, where the
    // write was cut), and no whole packet in it is the result.
    let mut raw = Vec::new();
    let _ = std::io::Read::read_to_end(&mut c.s, &mut raw);
    assert!(
        raw.len() < 48 << 20,
        "{} bytes reached the client",
        raw.len()
    );
    let mut at = 0;
    while raw.len() >= at + 12 {
        let kind = u32::from_be_bytes(raw[at + 4..at + 8].try_into().unwrap());
        let size = u32::from_be_bytes(raw[at + 8..at + 12].try_into().unwrap()) as usize;
        if raw.len() < at + 12 + size {
            break;
        }
        assert_ne!(
            kind,
            t::WORK_COMPLETE,
            "the result reached a client that was cut off"
        );
        at += 12 + size;
    }
    // The server keeps serving.
    let mut other = s.gear();
    assert!(other.admin("version").starts_with("OK"));
}
