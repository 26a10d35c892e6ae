//! What a launch is made of: the command template a job's argv is made from, and how a
//! job ended.

use std::path::PathBuf;

/// How to start jobs.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// Template; every `{id}` is replaced, then split on runs of spaces (no shell).
    pub template: String,
    /// Working directory (default: the daemon's).
    pub cwd: Option<PathBuf>,
    /// Added to the daemon's environment.
    pub env: Vec<(String, String)>,
    /// Bytes kept of stdout and of stderr each.
    pub max_output: usize,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal number, if killed by one.
    pub signal: Option<i32>,
    /// Captured stdout (lossy UTF-8, at most `max_output` bytes before decoding).
    pub stdout: String,
    /// Captured stderr, or why the launcher could not start.
    pub stderr: String,
}

impl Outcome {
    /// jobd's `result`: `ok` iff the exit code is exactly 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The outcome of a launcher that could not be started.
    pub fn spawn_failed(msg: String) -> Outcome {
        Outcome {
            code: None,
            signal: None,
            stdout: String::new(),
            stderr: msg,
        }
    }
}

/// The argv for job `id`.
pub fn argv(template: &str, id: u64) -> Vec<String> {
    template
        .replace("{id}", &id.to_string())
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_splits_on_spaces_and_fills_id() {
        assert_eq!(
            argv("php  x.php {id} --id={id}", 7),
            vec!["php", "x.php", "7", "--id=7"]
        );
    }
}
