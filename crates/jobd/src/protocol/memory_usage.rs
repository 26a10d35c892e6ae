//! Memory figures for `status` replies, in the shape of Node's `process.memoryUsage()`.

use serde_json::{json, Value};

/// Node's `process.memoryUsage()` shape; only `rss` is measured.
pub fn memory_usage() -> Value {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        // SAFETY: sysconf is a plain query.
        .map(|pages| pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64)
        .unwrap_or(0);
    json!({"rss": rss, "heapTotal": 0, "heapUsed": 0, "external": 0, "arrayBuffers": 0})
}
