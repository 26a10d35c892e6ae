//! The text that names a job to Gearman clients, `PREFIX:ID`. Two front ends write it (the
//! Gearman server in JOB_CREATED and friends, the WMP manager in a TAKE's `handle` header
//! so a WMP worker can correlate with a Gearman client), and they must agree byte for byte;
//! neither may depend on the other, so the one definition lives beside [`JobId`].

use crate::JobId;

/// Appends the Gearman job handle of job `id` under `prefix` (`PREFIX:ID`, the id in
/// decimal) to `out`. Writes into the caller's buffer, which grows at most once, so a
/// reused buffer costs no allocation on the hand-out path.
pub fn push_job_handle(prefix: &str, id: JobId, out: &mut String) {
    // ':' and the longest u64 in decimal (20 digits).
    out.reserve(prefix.len() + 21);
    out.push_str(prefix);
    out.push(':');
    out.push_str(itoa::Buffer::new().format(id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_the_prefix_a_colon_and_the_decimal_id() {
        let mut out = String::from("x");
        push_job_handle("H:box", 17, &mut out);
        assert_eq!(out, "xH:box:17");
        out.clear();
        push_job_handle("", u64::MAX, &mut out);
        assert_eq!(out, ":18446744073709551615");
    }
}
