//! Job handles: `PREFIX:ID`, where ID is the engine's job id.
//!
//! Using the engine id (instead of gearmand's per-process counter) makes a handle mean the
//! same job after a restart and lets a Gearman client name a job put through beanstalkd.

use jobyard_engine::{push_job_handle, JobId};

use crate::packet::MAX_HANDLE;

/// gearmand's default prefix: `H:` and the host name.
pub fn default_prefix() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_string()
    };
    format!("H:{host}")
}

/// The handle of job `id` (the engine's one spelling, which the WMP manager's TAKEs share).
pub fn format(prefix: &str, id: JobId) -> Vec<u8> {
    let mut handle = String::new();
    push_job_handle(prefix, id, &mut handle);
    handle.into_bytes()
}

/// The job a handle names, if it is one of ours. Over-long handles name nothing.
pub fn parse(prefix: &str, handle: &[u8]) -> Option<JobId> {
    if handle.len() > MAX_HANDLE {
        return None;
    }
    let rest = handle.strip_prefix(prefix.as_bytes())?.strip_prefix(b":")?;
    if rest.is_empty() || rest.len() > 20 || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(rest).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_strangers_are_rejected() {
        assert_eq!(format("H:box", 17), b"H:box:17");
        assert_eq!(parse("H:box", b"H:box:17"), Some(17));
        assert_eq!(parse("H:box", b"H:other:17"), None);
        assert_eq!(parse("H:box", b"H:box:"), None);
        assert_eq!(parse("H:box", b"H:box:+1"), None);
        assert_eq!(parse("H:box", b"H:box:99999999999999999999"), None);
        let long = [b"H:box:".as_slice(), &[b'1'; 60]].concat();
        assert_eq!(parse("H:box", &long), None);
        assert!(default_prefix().starts_with("H:"));
    }
}
