//! CPU time and memory of a process, from /proc/<pid>.

/// CPU time (user + system) and resident memory of one process at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// utime + stime, in seconds.
    pub cpu_s: f64,
    /// VmRSS in KiB.
    pub rss_kb: u64,
    /// VmHWM (peak RSS) in KiB.
    pub hwm_kb: u64,
}

/// Clock ticks per second for /proc/<pid>/stat times.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime in clock ticks from the text of /proc/<pid>/stat.
///
/// The command name (field 2) is in parentheses and may hold spaces and parentheses, so
/// fields are counted from the last ')'.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ')': field 3 (state) is index 0, so utime (field 14) is index 11, stime 12.
    let mut fields = rest.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A `Key:   1234 kB` value from the text of /proc/<pid>/status.
pub fn parse_status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Reads the process now; `None` if it does not exist (or /proc is unreadable).
pub fn sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Sample {
        cpu_s: parse_stat_ticks(&stat)? as f64 / clock_ticks(),
        rss_kb: parse_status_kb(&status, "VmRSS").unwrap_or(0),
        hwm_kb: parse_status_kb(&status, "VmHWM").unwrap_or(0),
    })
}

/// This process (the load generator), for telling client-bound runs apart.
pub fn sample_self() -> Option<Sample> {
    sample(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_are_counted_from_the_last_parenthesis() {
        let stat = "4242 (odd) name) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    250 75 0 0 20 0 5 0 100 12345678 900 18446744073709551615";
        assert_eq!(parse_stat_ticks(stat), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
        assert_eq!(parse_stat_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn status_values_are_read_by_key() {
        let status = "Name:\tbeanstalkd\nVmHWM:\t   20480 kB\nVmRSS:\t    8192 kB\nThreads:\t1\n";
        assert_eq!(parse_status_kb(status, "VmRSS"), Some(8192));
        assert_eq!(parse_status_kb(status, "VmHWM"), Some(20480));
        assert_eq!(parse_status_kb(status, "VmSwap"), None);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample_self().expect("/proc/self is readable");
        assert!(s.rss_kb > 0);
        assert!(s.cpu_s >= 0.0);
    }
}
