//! The admin text protocol's parser: one line in, one [`Admin`] command out.
//!
//! Separate from execution so the grammar (gearmand's quirks about arity, case and error
//! lines) can be tested without a server. Execution lives in `admin_exec`.

use bytes::Bytes;

/// One admin command, with gearmand's arity rules already applied.
#[derive(Debug, PartialEq, Eq)]
pub enum Admin {
    Status,
    PriorityStatus,
    Workers,
    ShowJobs,
    ShowUniqueJobs,
    /// `None` resets all three limits; otherwise HIGH, NORMAL, LOW (<= 0 = unlimited).
    MaxQueue(Bytes, Option<[i64; 3]>),
    CancelJob(Bytes),
    CreateFunction(Bytes),
    DropFunction(Bytes),
    GetPid,
    Version,
    /// jobyard's own version (`version` reports the gearmand version it implements).
    JobyardVersion,
    Verbose,
    Shutdown {
        graceful: bool,
    },
    /// A fixed reply line (errors of arity and the like), sent as is.
    Reply(&'static str),
    /// An unknown command word (possibly empty): `ERR UNKNOWN_COMMAND ...`.
    Unknown(Bytes),
}

/// The `ERR INVALID_ARGUMENTS` line gearmand sends for a command given the wrong arity.
fn incomplete(cmd: &'static str) -> Admin {
    Admin::Reply(match cmd {
        "maxqueue" => "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+maxqueue\r\n",
        "create" => "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+create\r\n",
        "drop" => "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+drop\r\n",
        _ => "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+shutdown\r\n",
    })
}

/// gearmand's `atoi`: optional sign and leading digits; anything else reads as 0.
pub fn atoi(s: &[u8]) -> i64 {
    let s = match s.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) => &s[i..],
        None => return 0,
    };
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut n: i64 = 0;
    for &b in digits.iter().take_while(|b| b.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add((b - b'0') as i64);
    }
    if neg {
        -n
    } else {
        n
    }
}

/// Parses one line (without its line ending).
pub fn parse(line: &[u8]) -> Admin {
    let words: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .collect();
    let Some(first) = words.first() else {
        return Admin::Unknown(Bytes::new());
    };
    let word = |i: usize| words.get(i).map(|w| w.to_ascii_lowercase());
    let is = |i: usize, s: &str| word(i).as_deref() == Some(s.as_bytes());
    let own = |i: usize| Bytes::copy_from_slice(words[i]);
    match first.to_ascii_lowercase().as_slice() {
        b"status" => Admin::Status,
        b"prioritystatus" => Admin::PriorityStatus,
        b"workers" => Admin::Workers,
        b"version" => Admin::Version,
        b"jobyard-version" => Admin::JobyardVersion,
        b"getpid" => Admin::GetPid,
        b"verbose" => Admin::Verbose,
        b"show" if words.len() == 1 => Admin::Unknown(own(0)),
        b"show" if is(1, "jobs") && words.len() == 2 => Admin::ShowJobs,
        b"show" if is(1, "unique") && is(2, "jobs") && words.len() == 3 => Admin::ShowUniqueJobs,
        b"show" => Admin::Reply("ERR UNKNOWN_SHOW_ARGUMENTS\r\n"),
        b"cancel" if words.len() < 3 || !is(1, "job") => Admin::Unknown(own(0)),
        b"cancel" if words.len() > 3 => Admin::Reply("ERR UNKNOWN_ERROR\r\n"),
        b"cancel" => Admin::CancelJob(own(2)),
        b"create" if words.len() == 3 && is(1, "function") => Admin::CreateFunction(own(2)),
        b"create" => incomplete("create"),
        b"drop" if words.len() == 3 && is(1, "function") => Admin::DropFunction(own(2)),
        b"drop" => incomplete("drop"),
        b"maxqueue" => match words.len() {
            1 => incomplete("maxqueue"),
            2 => Admin::MaxQueue(own(1), None),
            3 => {
                let n = atoi(words[2]);
                Admin::MaxQueue(own(1), Some([n, n, n]))
            }
            _ => {
                let low = words.get(4).map_or(0, |w| atoi(w));
                Admin::MaxQueue(own(1), Some([atoi(words[2]), atoi(words[3]), low]))
            }
        },
        b"shutdown" => match words.len() {
            1 => Admin::Shutdown { graceful: false },
            2 if is(1, "graceful") => Admin::Shutdown { graceful: true },
            _ => incomplete("shutdown"),
        },
        _ => Admin::Unknown(own(0)),
    }
}

/// The reply to an unknown command word, gearmand's exact text (no separator before the word).
pub fn unknown_reply(word: &[u8]) -> Vec<u8> {
    let mut v = b"ERR UNKNOWN_COMMAND Unknown+server+command".to_vec();
    v.extend_from_slice(word);
    v.extend_from_slice(b"\r\n");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const INCOMPLETE: &str =
        "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+";

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn commands_are_case_insensitive_and_split_on_runs_of_spaces() {
        assert_eq!(parse(b"STATUS"), Admin::Status);
        assert_eq!(parse(b"Show  Jobs"), Admin::ShowJobs);
        assert_eq!(parse(b"show unique JOBS"), Admin::ShowUniqueJobs);
        assert_eq!(parse(b"prioritystatus"), Admin::PriorityStatus);
        assert_eq!(
            parse(b"create function Foo"),
            Admin::CreateFunction(b("Foo"))
        );
        assert_eq!(parse(b"cancel job H:x:1"), Admin::CancelJob(b("H:x:1")));
    }

    #[test]
    fn arity_errors_match_gearmand() {
        assert_eq!(parse(b"show"), Admin::Unknown(b("show")));
        assert_eq!(
            parse(b"show nothing"),
            Admin::Reply("ERR UNKNOWN_SHOW_ARGUMENTS\r\n")
        );
        assert_eq!(parse(b"cancel job"), Admin::Unknown(b("cancel")));
        assert_eq!(
            parse(b"cancel job a b"),
            Admin::Reply("ERR UNKNOWN_ERROR\r\n")
        );
        assert!(matches!(parse(b"create function"), Admin::Reply(r) if r.ends_with("create\r\n")));
        assert!(matches!(parse(b"drop"), Admin::Reply(r) if r.ends_with("drop\r\n")));
        assert!(matches!(parse(b"maxqueue"), Admin::Reply(r) if r.starts_with(INCOMPLETE)));
        assert_eq!(parse(b""), Admin::Unknown(Bytes::new()));
        assert_eq!(
            unknown_reply(b"frob"),
            b"ERR UNKNOWN_COMMAND Unknown+server+commandfrob\r\n"
        );
    }

    #[test]
    fn maxqueue_forms() {
        assert_eq!(parse(b"maxqueue f"), Admin::MaxQueue(b("f"), None));
        assert_eq!(
            parse(b"maxqueue f 5"),
            Admin::MaxQueue(b("f"), Some([5, 5, 5]))
        );
        assert_eq!(
            parse(b"maxqueue f 1 2"),
            Admin::MaxQueue(b("f"), Some([1, 2, 0]))
        );
        assert_eq!(
            parse(b"maxqueue f 1 x 3"),
            Admin::MaxQueue(b("f"), Some([1, 0, 3]))
        );
        assert_eq!(atoi(b" -12abc"), -12);
        assert_eq!(atoi(b"99999999999999999999999"), i64::MAX);
    }

    #[test]
    fn shutdown_forms() {
        assert_eq!(parse(b"shutdown"), Admin::Shutdown { graceful: false });
        assert_eq!(
            parse(b"SHUTDOWN graceful"),
            Admin::Shutdown { graceful: true }
        );
        assert!(matches!(parse(b"shutdown now"), Admin::Reply(_)));
    }
}
