//! `jobyard beanstalkd [flags]`: beanstalkd 1.12's command line, so existing service files
//! keep working when the binary is swapped.
//!
//! Flags are read getopt-style (glued `-p11300`, grouped `-VV`). Same meanings: no `-b`
//! keeps jobs in memory only; `-f MS` syncs at most every MS ms and `-f0` on every write;
//! `-F` never syncs. Unknown flags print the usage and exit 5, as beanstalkd does.

use std::path::PathBuf;
use std::time::Duration;

use jobyard_storage::FsyncMode;

use crate::settings::{Settings, DEFAULT_MAX_JOB_SIZE, MAX_MAX_JOB_SIZE};

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Compat {
    /// Boxed: the settings are large and this enum is mostly passed by value.
    Run(Box<Settings>),
    /// Print this to stdout and exit 0 (`-v`, `-h`).
    Print(String),
    /// Print this to stderr and exit with this code.
    Fail(String, i32),
}

pub const USAGE: &str = "\
Use: beanstalkd [OPTIONS]   (served by jobyard)

Options:
 -b DIR   write-ahead log directory
 -f MS    fsync at most once every MS milliseconds (use -f0 for \"always fsync\")
 -F       never fsync
 -l ADDR  listen on address (default is 0.0.0.0)
 -p PORT  listen on port (default is 11300)
 -u USER  become user and group
 -z BYTES set the maximum job size in bytes (default is 65535);
          max allowed is 1073741824 bytes
 -s BYTES set the size of each write-ahead log file (default is 10485760);
          will be rounded up to a multiple of 4096 bytes
 -v       show version information
 -V       increase verbosity
 -h       show this help
";

/// Parses beanstalkd's flags (without the program name).
pub fn parse(args: &[String]) -> Compat {
    let mut addr = "0.0.0.0".to_string();
    let mut port = "11300".to_string();
    let mut dir: Option<PathBuf> = None;
    let mut fsync = FsyncMode::Interval(Duration::from_millis(50));
    let mut max_job_size = DEFAULT_MAX_JOB_SIZE;
    let mut segment_bytes: u64 = 10_485_760;
    let mut user = None;
    let mut verbosity = 0u8;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            return Compat::Fail(format!("beanstalkd: unknown argument: {arg}\n{USAGE}"), 5);
        };
        for (i, flag) in flags.char_indices() {
            if "lpbfszu".contains(flag) {
                let glued = &flags[i + 1..];
                let value = if glued.is_empty() {
                    match it.next() {
                        Some(v) => v.clone(),
                        None => {
                            return Compat::Fail(
                                format!("beanstalkd: -{flag} requires an argument\n{USAGE}"),
                                5,
                            )
                        }
                    }
                } else {
                    glued.to_string()
                };
                let bad = || Compat::Fail(format!("beanstalkd: bad value for -{flag}: {value}"), 5);
                match flag {
                    'l' => addr = value.clone(),
                    'p' => port = value.clone(),
                    'b' => dir = Some(PathBuf::from(&value)),
                    'f' => match value.parse::<u64>() {
                        Ok(0) => fsync = FsyncMode::Always,
                        Ok(ms) => fsync = FsyncMode::Interval(Duration::from_millis(ms)),
                        Err(_) => return bad(),
                    },
                    's' => match value.parse::<u64>() {
                        Ok(n) => segment_bytes = n.max(4096),
                        Err(_) => return bad(),
                    },
                    'z' => match value.parse::<u64>() {
                        Ok(n) if n > MAX_MAX_JOB_SIZE as u64 => {
                            eprintln!("beanstalkd: maximum job size was set to {MAX_MAX_JOB_SIZE}");
                            max_job_size = MAX_MAX_JOB_SIZE;
                        }
                        Ok(n) => max_job_size = n as u32,
                        Err(_) => return bad(),
                    },
                    'u' => user = Some(value.clone()),
                    _ => unreachable!(),
                }
                break;
            }
            match flag {
                'F' => fsync = FsyncMode::Never,
                'V' => verbosity = verbosity.saturating_add(1),
                'v' => {
                    return Compat::Print(format!(
                        "beanstalkd 1.12 (jobyard {})\n",
                        env!("CARGO_PKG_VERSION")
                    ))
                }
                'h' => return Compat::Print(USAGE.to_string()),
                'c' | 'n' => eprintln!("beanstalkd: -{flag} is obsolete and ignored"),
                _ => return Compat::Fail(format!("beanstalkd: unknown flag: -{flag}\n{USAGE}"), 5),
            }
        }
    }
    // `-l unix:PATH` listens on a UNIX socket and ignores -p, as beanstalkd 1.12 does.
    let listen = if addr.starts_with("unix:") {
        addr.to_string()
    } else if addr.contains(':') && !addr.starts_with('[') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    };
    Compat::Run(Box::new(Settings {
        data_dir: dir,
        beanstalk_listen: Some(listen),
        fsync,
        max_job_size,
        segment_bytes,
        user,
        verbosity,
        ..Settings::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Settings {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&args) {
            Compat::Run(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_beanstalkds() {
        let s = run(&[]);
        assert_eq!(s.data_dir, None, "no -b: memory only");
        assert_eq!(s.beanstalk_listen.as_deref(), Some("0.0.0.0:11300"));
        assert_eq!(s.fsync, FsyncMode::Interval(Duration::from_millis(50)));
        assert_eq!(s.max_job_size, 65535);
    }

    #[test]
    fn glued_grouped_and_separate_values_all_work() {
        let s = run(&[
            "-l",
            "127.0.0.1",
            "-p11301",
            "-b/tmp/x",
            "-f0",
            "-z",
            "100",
            "-VV",
        ]);
        assert_eq!(s.beanstalk_listen.as_deref(), Some("127.0.0.1:11301"));
        assert_eq!(s.data_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(s.fsync, FsyncMode::Always);
        assert_eq!(s.max_job_size, 100);
        assert_eq!(s.verbosity, 2);
        assert_eq!(run(&["-F"]).fsync, FsyncMode::Never);
        assert_eq!(
            run(&["-f", "200"]).fsync,
            FsyncMode::Interval(Duration::from_millis(200))
        );
        assert_eq!(
            run(&["-l", "::1"]).beanstalk_listen.as_deref(),
            Some("[::1]:11300")
        );
        assert_eq!(run(&["-c", "-n"]).max_job_size, 65535);
        assert_eq!(
            run(&["-l", "unix:/run/bs.sock", "-p", "9"])
                .beanstalk_listen
                .as_deref(),
            Some("unix:/run/bs.sock"),
            "-p is ignored with a UNIX socket"
        );
    }

    #[test]
    fn oversized_z_is_lowered_and_unknown_flags_exit_5() {
        assert_eq!(run(&["-z", "2000000000"]).max_job_size, MAX_MAX_JOB_SIZE);
        let args = vec!["-x".to_string()];
        assert!(matches!(parse(&args), Compat::Fail(_, 5)));
        let args = vec!["-p".to_string()];
        assert!(matches!(parse(&args), Compat::Fail(_, 5)));
        let args = vec!["-v".to_string()];
        assert!(matches!(parse(&args), Compat::Print(v) if v.starts_with("beanstalkd 1.12")));
        let args = vec!["-h".to_string()];
        assert!(matches!(parse(&args), Compat::Print(u) if u.contains("-z BYTES")));
    }
}
