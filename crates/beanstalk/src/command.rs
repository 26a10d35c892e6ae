//! Parsing one beanstalkd command line (without its CRLF).
//!
//! Names are matched by prefix in beanstalkd's order, so inputs like `reservex` or
//! `statsx` get the same reply as from beanstalkd (`BAD_FORMAT`). Numbers are strict:
//! decimal digits only, leading spaces allowed, range-checked, no trailing junk — also for
//! `kick` and `reserve-with-timeout`, where beanstalkd 1.12 reads garbage as a number.

use bytes::Bytes;

/// Longest command line, CRLF included: `pause-tube <200-byte name> 4294967295\r\n`.
pub const MAX_LINE: usize = 224;
/// Longest tube name.
pub const MAX_NAME: usize = 200;

/// A parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// The header of a put; the body follows on the wire.
    Put {
        pri: u32,
        delay: u32,
        ttr: u32,
        bytes: u32,
    },
    Use(Bytes),
    Reserve,
    ReserveWithTimeout(u32),
    ReserveJob(u64),
    Delete(u64),
    Release {
        id: u64,
        pri: u32,
        delay: u32,
    },
    Bury {
        id: u64,
        pri: u32,
    },
    Touch(u64),
    Watch(Bytes),
    Ignore(Bytes),
    Peek(u64),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u32),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(Bytes),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube(Bytes, u32),
    Quit,
}

/// Why a line is not a command. Both are sent back as the reply of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    BadFormat,
    UnknownCommand,
}

impl ParseError {
    pub fn reply(self) -> &'static [u8] {
        match self {
            ParseError::BadFormat => b"BAD_FORMAT\r\n",
            ParseError::UnknownCommand => b"UNKNOWN_COMMAND\r\n",
        }
    }
}

use ParseError::{BadFormat, UnknownCommand};

/// Argument cursor with beanstalkd's number rules.
struct Args<'a>(&'a [u8]);

impl Args<'_> {
    fn number(&mut self, max: u64) -> Result<u64, ParseError> {
        // One pass: spaces, then digits accumulated as they are checked.
        let s = self.0;
        let mut i = s.iter().take_while(|&&b| b == b' ').count();
        let start = i;
        let mut value: u64 = 0;
        while let Some(d) = s.get(i).filter(|b| b.is_ascii_digit()) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add((d - b'0') as u64))
                .ok_or(BadFormat)?;
            i += 1;
        }
        if i == start || value > max {
            return Err(BadFormat);
        }
        self.0 = &s[i..];
        Ok(value)
    }
    fn u32(&mut self) -> Result<u32, ParseError> {
        self.number(u32::MAX as u64).map(|v| v as u32)
    }
    fn u64(&mut self) -> Result<u64, ParseError> {
        self.number(u64::MAX)
    }
    /// A tube name: skips leading spaces, takes up to the next space.
    fn name(&mut self) -> Result<Bytes, ParseError> {
        let s = self.0;
        let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
        let len = s[start..].iter().take_while(|&&b| b != b' ').count();
        let name = &s[start..start + len];
        self.0 = &s[start + len..];
        valid_name(name)
    }
    fn end(&self) -> Result<(), ParseError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(BadFormat)
        }
    }
}

/// Checks a tube name: 1..=200 bytes of `A-Za-z0-9-+/;.$_()`, not starting with `-`.
pub fn valid_name(name: &[u8]) -> Result<Bytes, ParseError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name[0] != b'-'
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b));
    if ok {
        Ok(Bytes::copy_from_slice(name))
    } else {
        Err(BadFormat)
    }
}

/// Parses one line. The line has no CRLF and is at most `MAX_LINE - 2` bytes.
pub fn parse_line(line: &[u8]) -> Result<Command, ParseError> {
    if line.contains(&0) {
        return Err(BadFormat);
    }
    // (prefix, takes arguments). Order matters: it is beanstalkd's matching order.
    const PREFIXES: &[&[u8]] = &[
        b"put ",
        b"peek ",
        b"peek-ready",
        b"peek-delayed",
        b"peek-buried",
        b"reserve-with-timeout ",
        b"reserve-job ",
        b"reserve",
        b"delete ",
        b"release ",
        b"bury ",
        b"kick ",
        b"kick-job ",
        b"touch ",
        b"stats-job ",
        b"stats-tube ",
        b"stats",
        b"use ",
        b"watch ",
        b"ignore ",
        b"list-tubes-watched",
        b"list-tube-used",
        b"list-tubes",
        b"quit",
        b"pause-tube",
    ];
    // The first byte rules out most prefixes without comparing the rest.
    let first = line.first().copied();
    let Some(prefix) = PREFIXES
        .iter()
        .find(|p| Some(p[0]) == first && line.starts_with(p))
    else {
        return Err(UnknownCommand);
    };
    let rest = &line[prefix.len()..];
    let mut a = Args(rest);
    let bare = |c: Command| {
        if rest.is_empty() {
            Ok(c)
        } else {
            Err(BadFormat)
        }
    };
    let whole_name = || valid_name(rest);
    match *prefix {
        b"put " => {
            let pri = a.u32()?;
            let delay = a.u32()?;
            let ttr = a.u32()?;
            let bytes = a.u32()?;
            // An oversized put with trailing junk is still JOB_TOO_BIG: the decoder
            // checks `put_size` when this says BAD_FORMAT.
            ok_after(
                Ok(Command::Put {
                    pri,
                    delay,
                    ttr,
                    bytes,
                }),
                &a,
            )
        }
        b"peek " => ok_after(a.u64().map(Command::Peek), &a),
        b"peek-ready" => bare(Command::PeekReady),
        b"peek-delayed" => bare(Command::PeekDelayed),
        b"peek-buried" => bare(Command::PeekBuried),
        b"reserve-with-timeout " => ok_after(a.u32().map(Command::ReserveWithTimeout), &a),
        b"reserve-job " => ok_after(a.u64().map(Command::ReserveJob), &a),
        b"reserve" => bare(Command::Reserve),
        b"delete " => ok_after(a.u64().map(Command::Delete), &a),
        b"release " => {
            let id = a.u64()?;
            let pri = a.u32()?;
            let delay = a.u32()?;
            ok_after(Ok(Command::Release { id, pri, delay }), &a)
        }
        b"bury " => {
            let id = a.u64()?;
            let pri = a.u32()?;
            ok_after(Ok(Command::Bury { id, pri }), &a)
        }
        b"kick " => ok_after(a.u32().map(Command::Kick), &a),
        b"kick-job " => ok_after(a.u64().map(Command::KickJob), &a),
        b"touch " => ok_after(a.u64().map(Command::Touch), &a),
        b"stats-job " => ok_after(a.u64().map(Command::StatsJob), &a),
        b"stats-tube " => whole_name().map(Command::StatsTube),
        b"stats" => bare(Command::Stats),
        b"use " => whole_name().map(Command::Use),
        b"watch " => whole_name().map(Command::Watch),
        b"ignore " => whole_name().map(Command::Ignore),
        b"list-tubes-watched" => bare(Command::ListTubesWatched),
        b"list-tube-used" => bare(Command::ListTubeUsed),
        b"list-tubes" => bare(Command::ListTubes),
        b"quit" => Ok(Command::Quit),
        b"pause-tube" => {
            let name = a.name()?;
            let delay = a.u32()?;
            ok_after(Ok(Command::PauseTube(name, delay)), &a)
        }
        _ => Err(UnknownCommand),
    }
}

fn ok_after(c: Result<Command, ParseError>, a: &Args) -> Result<Command, ParseError> {
    let c = c?;
    a.end()?;
    Ok(c)
}

/// Parses just the numbers of a put line, ignoring what follows them: used to decide
/// `JOB_TOO_BIG` before complaining about trailing junk.
pub(crate) fn put_size(line: &[u8]) -> Option<u32> {
    let mut a = Args(line.strip_prefix(b"put ")?);
    a.u32().ok()?;
    a.u32().ok()?;
    a.u32().ok()?;
    a.u32().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, ParseError> {
        parse_line(s.as_bytes())
    }

    #[test]
    fn bare_names_without_arguments_are_unknown_and_with_a_space_are_bad_format() {
        for name in [
            "put",
            "delete",
            "use",
            "watch",
            "ignore",
            "peek",
            "kick",
            "touch",
            "bury",
            "release",
            "kick-job",
            "",
            " ",
            "PUT 0 0 1 1",
            "frobnicate",
        ] {
            assert_eq!(p(name), Err(UnknownCommand), "{name:?}");
        }
        for line in ["put ", "delete ", "use "] {
            assert_eq!(p(line), Err(BadFormat), "{line:?}");
        }
    }

    #[test]
    fn prefix_quirks_match_beanstalkd() {
        for line in [
            "reservex",
            "reserve-job",
            "reserve-with-timeout",
            "statsx",
            "stats-job",
            "stats-tube",
            "reserve ",
            "stats ",
            "list-tubes ",
            "peek-ready ",
        ] {
            assert_eq!(p(line), Err(BadFormat), "{line:?}");
        }
        assert_eq!(p("quitx"), Ok(Command::Quit));
        assert_eq!(
            p("pause-tubeNAME 5"),
            Ok(Command::PauseTube(Bytes::from_static(b"NAME"), 5))
        );
    }

    #[test]
    fn numbers_allow_leading_spaces_and_zeros_and_nothing_else() {
        assert_eq!(
            p("put  0  0  1  1"),
            Ok(Command::Put {
                pri: 0,
                delay: 0,
                ttr: 1,
                bytes: 1
            })
        );
        assert_eq!(p("peek 0001"), Ok(Command::Peek(1)));
        for line in [
            "delete -1",
            "delete +1",
            "delete 0x10",
            "delete 1.0",
            "delete 1 ",
            "delete 18446744073709551616",
            "bury 1 4294967296",
            "kick 1x",
            "kick -1",
            "kick 4294967296",
            "reserve-with-timeout -1",
            "reserve-with-timeout abc",
            "reserve-with-timeout 1x",
            "put 0 0 1 1 x",
        ] {
            assert_eq!(p(line), Err(BadFormat), "{line:?}");
        }
        assert_eq!(
            p("delete 18446744073709551615"),
            Ok(Command::Delete(u64::MAX))
        );
        assert_eq!(p("kick 4294967295"), Ok(Command::Kick(u32::MAX)));
    }

    #[test]
    fn tube_names_follow_the_charset_and_length_rules() {
        let max = "a".repeat(200);
        assert_eq!(
            p(&format!("use {max}")),
            Ok(Command::Use(Bytes::from(max.clone())))
        );
        assert_eq!(p(&format!("use {max}a")), Err(BadFormat));
        assert_eq!(
            p("watch A-z0+9/;.$_()"),
            Ok(Command::Watch(Bytes::from_static(b"A-z0+9/;.$_()")))
        );
        for line in [
            "use -x", "use  x", "use x ", "use a b", "use a!", "use é", "use a:b",
        ] {
            assert_eq!(p(line), Err(BadFormat), "{line:?}");
        }
        assert_eq!(p("use a\0"), Err(BadFormat));
    }

    #[test]
    fn the_longest_legal_command_fits_the_line_limit() {
        let line = format!("pause-tube {} 4294967295", "n".repeat(200));
        assert_eq!(line.len() + 2, MAX_LINE);
        assert!(matches!(p(&line), Ok(Command::PauseTube(_, u32::MAX))));
    }

    #[test]
    fn every_command_parses() {
        let cases: &[(&str, Command)] = &[
            ("reserve", Command::Reserve),
            ("reserve-with-timeout 0", Command::ReserveWithTimeout(0)),
            ("reserve-job 9", Command::ReserveJob(9)),
            (
                "release 1 2 3",
                Command::Release {
                    id: 1,
                    pri: 2,
                    delay: 3,
                },
            ),
            ("bury 1 2", Command::Bury { id: 1, pri: 2 }),
            ("touch 4", Command::Touch(4)),
            ("ignore t", Command::Ignore(Bytes::from_static(b"t"))),
            ("peek-ready", Command::PeekReady),
            ("peek-delayed", Command::PeekDelayed),
            ("peek-buried", Command::PeekBuried),
            ("kick 10", Command::Kick(10)),
            ("kick-job 3", Command::KickJob(3)),
            ("stats-job 3", Command::StatsJob(3)),
            ("stats-tube t", Command::StatsTube(Bytes::from_static(b"t"))),
            ("stats", Command::Stats),
            ("list-tubes", Command::ListTubes),
            ("list-tube-used", Command::ListTubeUsed),
            ("list-tubes-watched", Command::ListTubesWatched),
            (
                "pause-tube t 5",
                Command::PauseTube(Bytes::from_static(b"t"), 5),
            ),
            ("quit", Command::Quit),
        ];
        for (line, cmd) in cases {
            assert_eq!(&p(line).unwrap(), cmd, "{line}");
        }
    }
}
