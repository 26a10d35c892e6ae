//! glibc malloc settings for the server process, made before its first thread starts.
//!
//! With bodies kept only in the log, a put allocates its body and a later turn frees it,
//! while the backlog (job pages, ready-set nodes) keeps growing. In glibc's per-thread
//! arenas that growth extends the heap a page at a time (an `mprotect` per 4 KiB), and
//! every extension first sweeps the freed bodies out of the fast bins
//! (`malloc_consolidate`), so the next puts' small allocations take the slow path. One
//! arena grown by `brk` with a few MiB of headroom extends rarely and sweeps rarely:
//! docs/performance.md ("Bodies kept only in the log", the put cost) has the figures.

/// Headroom the heap grows by beyond each request that does not fit: one `brk` (and one
/// sweep of the fast bins) per this much backlog growth instead of per page. Untouched
/// headroom is address space only, not resident memory.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TOP_PAD: libc::c_int = 4 << 20;

/// Applies the server's malloc settings, unless the operator chose their own through
/// `GLIBC_TUNABLES` (which glibc has applied already and which these would override).
/// Must run before any thread is spawned: the arena limit is read when the first thread
/// needs an arena.
pub fn for_server() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let operator_chose = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("malloc"));
        if !operator_chose {
            apply();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() {
    // SAFETY: mallopt only changes allocator parameters; it is called before any other
    // thread exists, so no allocation races with the change.
    let (arena, pad) = unsafe {
        (
            libc::mallopt(libc::M_ARENA_MAX, 1),
            libc::mallopt(libc::M_TOP_PAD, TOP_PAD),
        )
    };
    if arena != 1 || pad != 1 {
        // Not fatal: the server works with glibc's defaults, only its puts cost more.
        eprintln!("jobyard: mallopt refused the server's malloc settings; using glibc's");
    }
}
