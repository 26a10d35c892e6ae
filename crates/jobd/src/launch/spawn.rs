//! Starting a launcher without copying the daemon: `clone(CLONE_VM | CLONE_VFORK)`, the way
//! glibc's `posix_spawn` starts processes, plus the two things `posix_spawn` cannot do
//! (`setsid` and the parent-death signal).
//!
//! Why: `fork` copies the daemon's page tables and then makes every page it writes fault
//! once (copy-on-write) until the child has exec'd; profiled at concurrency 8 that was about
//! 60 % of the worker's CPU per job (docs/benchmarks.md#jobd). A `CLONE_VM` child borrows
//! the daemon's memory until `execve`, and the calling thread waits for that moment.
//!
//! The child also gets a pidfd (`CLONE_PIDFD`), which the runtime polls for its exit and
//! which reaps it with `waitid(P_PIDFD)`: no SIGCHLD handler, no scan of all children.
//!
//! Rules for the child function (it runs in the daemon's memory while other threads of
//! the daemon keep running): raw system calls only, no allocation, no locks, nothing
//! written but its own stack and the error slot. Everything it needs (paths, argv, envp)
//! is prepared by the parent before the clone.
//!
//! Kernels without `CLONE_PIDFD` (before 5.2) get [`SpawnError::Unsupported`]; the
//! launcher then falls back to `tokio::process` (fork).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Why a spawn did not happen.
#[derive(Debug)]
pub enum SpawnError {
    /// This kernel cannot do it this way; use another way.
    Unsupported,
    /// The launcher could not be started (the reason is what `std::process` would say).
    Failed(io::Error),
}

/// A started child: its pid (also its process group and session), a pidfd to wait on,
/// and the read ends of its stdout and stderr pipes.
pub struct Spawned {
    /// Process id (= process group id: the child called `setsid`).
    pub pid: i32,
    pidfd: OwnedFd,
    /// Read end of the child's stdout (non-blocking).
    pub stdout: OwnedFd,
    /// Read end of the child's stderr (non-blocking).
    pub stderr: OwnedFd,
}

/// What the child function gets: pointers into memory the parent owns and keeps alive
/// until the child has exec'd or exited (the parent is suspended until then).
#[repr(C)]
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    /// `/bin/sh path args…`, for a file without `#!` (what `execvp` does on ENOEXEC).
    sh_argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// errno of the step that failed, written by the child before it exits.
    error: i32,
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// The environment the children get, built once per `extra` (the daemon does not change
/// its own environment while it runs): on every launch, `std::env::vars_os` alone was 1 %
/// of the worker's samples at 1x8 (perf), before the C strings made of every variable.
fn cached_environment(extra: &[(String, String)]) -> io::Result<Arc<Vec<CString>>> {
    type Cached = Option<(Vec<(String, String)>, Arc<Vec<CString>>)>;
    static CACHE: Mutex<Cached> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((key, envs)) = cache.as_ref() {
        if key.as_slice() == extra {
            return Ok(envs.clone());
        }
    }
    let envs = Arc::new(environment(extra)?);
    *cache = Some((extra.to_vec(), envs.clone()));
    Ok(envs)
}

/// The environment the child gets: the daemon's, with `extra` set on top.
fn environment(extra: &[(String, String)]) -> io::Result<Vec<CString>> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| OsStr::new(e) == k))
        .collect();
    vars.extend(
        extra
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    vars.into_iter()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&kv))
        })
        .collect()
}

/// Finds `program` the way `execvp` would (in the child's `PATH`), done in the parent
/// because the child may not allocate. A name with a `/` is taken as it is.
fn resolve(program: &str, extra: &[(String, String)], cwd: Option<&Path>) -> io::Result<PathBuf> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = extra
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| OsString::from(v))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let mut denied = false;
    for dir in std::env::split_paths(&path) {
        let dir = match (dir.is_relative(), cwd) {
            (true, Some(c)) => c.join(dir),
            _ => dir,
        };
        let candidate = dir.join(program);
        let c = cstring(candidate.as_os_str())?;
        // SAFETY: plain syscall on a valid C string.
        if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 && candidate.is_file() {
            return Ok(candidate);
        }
        if candidate.exists() {
            denied = true;
        }
    }
    Err(io::Error::from_raw_os_error(if denied {
        libc::EACCES
    } else {
        libc::ENOENT
    }))
}

/// A pipe whose read end stays here and whose write end goes to the child (close-on-exec
/// until the child dup2s it onto 1 or 2). Both ends are created non-blocking in one call,
/// which is what the read end needs; the child makes its end blocking again after the
/// dup2 (one `fcntl` there instead of a `F_GETFL` + `F_SETFL` pair here per pipe: the
/// worker's own system calls per launch are part of its CPU per job). Both are above 2,
/// so that the child's dup2s cannot overwrite each other.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// `fd` moved to a number above 2 if it is 0, 1 or 2 (a daemon started with closed stdio).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on a descriptor we own; the new one is ours too.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// `/dev/null` for the children's stdin, opened once for the life of the daemon (an open
/// and a close fewer per launch; the child dup2s it, which leaves this one open).
fn dev_null() -> io::Result<RawFd> {
    static DEV_NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = DEV_NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    // SAFETY: plain open of a constant path.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened.
    let fd = above_stdio(unsafe { OwnedFd::from_raw_fd(fd) })?;
    // A thread that lost the race drops its own copy.
    Ok(DEV_NULL.get_or_init(|| fd).as_raw_fd())
}

/// Starts `argv` (argv[0] looked up in `PATH` as `execvp` does) in `cwd` with the daemon's
/// environment plus `env`, stdin `/dev/null`, stdout and stderr piped, in a new session
/// (so its process group is its pid), with SIGKILL as its parent-death signal.
pub fn spawn(
    argv: &[String],
    cwd: Option<&Path>,
    env: &[(String, String)],
) -> Result<Spawned, SpawnError> {
    let fail = SpawnError::Failed;
    let program = argv.first().ok_or_else(|| {
        fail(io::Error::new(
            io::ErrorKind::InvalidInput,
            "launcher command is empty",
        ))
    })?;
    let path = resolve(program, env, cwd).map_err(fail)?;
    let path = cstring(path.as_os_str()).map_err(fail)?;
    let args: Vec<CString> = argv
        .iter()
        .map(|a| cstring(OsStr::new(a)))
        .collect::<io::Result<_>>()
        .map_err(fail)?;
    let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    arg_ptrs.push(std::ptr::null());
    let mut sh_ptrs: Vec<*const libc::c_char> = vec![c"/bin/sh".as_ptr(), path.as_ptr()];
    sh_ptrs.extend(args.iter().skip(1).map(|a| a.as_ptr()));
    sh_ptrs.push(std::ptr::null());
    let envs = cached_environment(env).map_err(fail)?;
    let mut env_ptrs: Vec<*const libc::c_char> = envs.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let cwd = cwd
        .map(|c| cstring(c.as_os_str()))
        .transpose()
        .map_err(fail)?;
    let stdin = dev_null().map_err(fail)?;
    let (out_r, out_w) = pipe().map_err(fail)?;
    let (err_r, err_w) = pipe().map_err(fail)?;
    let mut args_block = ChildArgs {
        path: path.as_ptr(),
        argv: arg_ptrs.as_ptr(),
        sh_argv: sh_ptrs.as_ptr(),
        envp: env_ptrs.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        stdin,
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        error: 0,
    };
    // The child runs on a stack of its own; it needs very little (a few system calls).
    const STACK: usize = 64 * 1024;
    // Not zeroed (nothing reads what the child did not write): clearing 64 KiB on every
    // launch showed in the worker's profile.
    let mut stack: Vec<u8> = Vec::with_capacity(STACK);
    // SAFETY: the top of the allocation, aligned down to 16 bytes as the ABI requires.
    let top = unsafe { stack.as_mut_ptr().add(STACK) } as usize & !15;
    let mut pidfd: libc::c_int = -1;
    // Signals stay blocked from here until the child's execve (it unblocks them itself
    // just before): no handler of the daemon runs on the child's stack meanwhile.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; the clone's child only reads `args_block` (and
    // writes its `error`), all of which outlive the call because CLONE_VFORK suspends
    // this thread until the child has exec'd or exited.
    let pid = unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            &mut args_block as *mut ChildArgs as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        );
        let e = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(match e.raw_os_error() {
                Some(libc::EINVAL) | Some(libc::ENOSYS) => SpawnError::Unsupported,
                _ => SpawnError::Failed(e),
            });
        }
        pid
    };
    drop(stack);
    // SAFETY: the kernel wrote a new pidfd for the child (CLONE_PIDFD).
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: read after the child is gone from our memory (exec'd or exited).
    let error = unsafe { std::ptr::read_volatile(&args_block.error) };
    if error != 0 {
        // The child exited with 127 before exec: reap it, report why.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child through its pidfd.
        unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            )
        };
        return Err(SpawnError::Failed(io::Error::from_raw_os_error(error)));
    }
    Ok(Spawned {
        pid,
        pidfd,
        stdout: out_r,
        stderr: err_r,
    })
}

/// The child: runs in the daemon's memory on its own stack until `execve`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: raw system calls only; `arg` points at the parent's ChildArgs, which lives
    // until this function execs or returns.
    unsafe {
        let a = &mut *(arg as *mut ChildArgs);
        macro_rules! check {
            ($e:expr) => {
                if $e < 0 {
                    a.error = *libc::__errno_location();
                    return 127;
                }
            };
        }
        // Rust ignores SIGPIPE; an ignored signal stays ignored across exec, and
        // std::process resets it for children too.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        check!(libc::setsid());
        // A kill -9 of the daemon takes the launcher with it (see launcher.rs).
        check!(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL));
        check!(libc::dup2(a.stdin, 0));
        check!(libc::dup2(a.stdout, 1));
        check!(libc::dup2(a.stderr, 2));
        // The pipes were made non-blocking for the daemon's read ends (see `pipe`); the
        // child's writes must block when a pipe is full, as with any ordinary pipe.
        check!(libc::fcntl(1, libc::F_SETFL, 0));
        check!(libc::fcntl(2, libc::F_SETFL, 0));
        if !a.cwd.is_null() {
            check!(libc::chdir(a.cwd));
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(a.path, a.argv, a.envp);
        let mut e = *libc::__errno_location();
        if e == libc::ENOEXEC {
            libc::execve(*a.sh_argv, a.sh_argv, a.envp);
            e = *libc::__errno_location();
        }
        a.error = e;
        127
    }
}

impl Spawned {
    /// Waits (without blocking the runtime) for the child to end and reaps it: its exit
    /// code, or the signal that killed it.
    pub async fn wait(pidfd: OwnedFd) -> io::Result<(Option<i32>, Option<i32>)> {
        // SAFETY: an OwnedFd keeps its descriptor open and unchanged while owned.
        let fd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        loop {
            let mut guard = fd.readable().await?;
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waits for our own child through its pidfd; WNOHANG never blocks.
            let r = unsafe {
                libc::waitid(
                    libc::P_PIDFD,
                    fd.get_ref().as_raw_fd() as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // SAFETY: filled in by waitid (zero pid: not exited yet).
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if pid == 0 {
                guard.clear_ready();
                continue;
            }
            return Ok(match info.si_code {
                libc::CLD_EXITED => (Some(status), None),
                _ => (None, Some(status)),
            });
        }
    }

    /// Splits into the pidfd (for [`Spawned::wait`]) and the pipes.
    pub fn into_parts(self) -> (i32, OwnedFd, OwnedFd, OwnedFd) {
        (self.pid, self.pidfd, self.stdout, self.stderr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_environment_follows_the_extra_variables_asked_for() {
        let has = |envs: &[CString], kv: &str| envs.iter().any(|e| e.as_bytes() == kv.as_bytes());
        let one = [("JOBYARD_CACHE_TEST".to_string(), "1".to_string())];
        let two = [("JOBYARD_CACHE_TEST".to_string(), "2".to_string())];
        let a = cached_environment(&one).unwrap();
        assert!(has(&a, "JOBYARD_CACHE_TEST=1"));
        let b = cached_environment(&two).unwrap();
        assert!(has(&b, "JOBYARD_CACHE_TEST=2") && !has(&b, "JOBYARD_CACHE_TEST=1"));
        let none = cached_environment(&[]).unwrap();
        assert!(!none
            .iter()
            .any(|e| e.as_bytes().starts_with(b"JOBYARD_CACHE_TEST=")));
        assert!(has(
            &cached_environment(&one).unwrap(),
            "JOBYARD_CACHE_TEST=1"
        ));
        assert!(has(
            &none,
            &format!("PATH={}", std::env::var("PATH").unwrap())
        ));
    }

    fn run(argv: &[&str], env: &[(String, String)]) -> (Option<i32>, Option<i32>, Vec<u8>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
            let s = match spawn(&argv, None, env) {
                Ok(s) => s,
                Err(SpawnError::Unsupported) => return (Some(0), None, b"skip".to_vec()),
                Err(SpawnError::Failed(e)) => panic!("{e}"),
            };
            let (_, pidfd, out, _err) = s.into_parts();
            let code = Spawned::wait(pidfd).await.unwrap();
            let mut buf = Vec::new();
            let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(out).unwrap();
            tokio::io::AsyncReadExt::read_to_end(&mut rx, &mut buf)
                .await
                .unwrap();
            (code.0, code.1, buf)
        })
    }

    #[test]
    fn exit_codes_signals_env_and_output() {
        let env = vec![("JOBYARD_SPAWN_TEST".to_string(), "x1".to_string())];
        let (code, sig, out) = run(&["sh", "-c", "echo $JOBYARD_SPAWN_TEST; exit 3"], &env);
        if out == b"skip" {
            return;
        }
        assert_eq!((code, sig), (Some(3), None));
        assert_eq!(out, b"x1\n");
        let (code, sig, _) = run(&["sh", "-c", "kill -TERM $$"], &[]);
        assert_eq!((code, sig), (None, Some(libc::SIGTERM)));
        // Its own session: the process group is the pid.
        let (_, _, out) = run(&["sh", "-c", "ps -o pgid= -p $$; echo $$"], &[]);
        let text = String::from_utf8_lossy(&out);
        let nums: Vec<&str> = text.split_whitespace().collect();
        if nums.len() == 2 {
            assert_eq!(nums[0], nums[1], "{text}");
        }
    }

    #[test]
    fn the_childs_pipes_block_when_full_and_stdin_is_dev_null() {
        // The pipes are created non-blocking for the daemon's side; the child's ends must
        // block again, or a job writing more than a pipe holds would get EAGAIN and lose
        // output. Run twice: /dev/null is opened once and shared.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for _ in 0..2 {
            let script = "cat; head -c 300000 /dev/zero; echo tail >&2";
            let argv: Vec<String> = ["sh", "-c", script].map(String::from).to_vec();
            let s = match spawn(&argv, None, &[]) {
                Ok(s) => s,
                Err(SpawnError::Unsupported) => return,
                Err(SpawnError::Failed(e)) => panic!("{e}"),
            };
            let (_, pidfd, out, err) = s.into_parts();
            let (status, out, err) = rt.block_on(async {
                let read = |fd| async move {
                    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).unwrap();
                    let mut buf = Vec::new();
                    tokio::io::AsyncReadExt::read_to_end(&mut rx, &mut buf)
                        .await
                        .unwrap();
                    buf
                };
                tokio::join!(Spawned::wait(pidfd), read(out), read(err))
            });
            assert_eq!(status.unwrap(), (Some(0), None));
            assert_eq!(out.len(), 300_000);
            assert_eq!(err, b"tail\n");
        }
    }

    #[test]
    fn a_missing_program_is_enoent() {
        match spawn(&["/nonexistent/launcher".to_string()], None, &[]) {
            Err(SpawnError::Failed(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
            Err(SpawnError::Unsupported) => {}
            Ok(_) => panic!("started a missing program"),
        }
        match spawn(&["no-such-launcher-anywhere".to_string()], None, &[]) {
            Err(SpawnError::Failed(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
            Err(SpawnError::Unsupported) => {}
            Ok(_) => panic!("started a missing program"),
        }
    }
}
