//! The thread model, decided here and nowhere else.
//!
//! Today: tokio's multi-threaded runtime with one thread per core unless set otherwise.
//! At moderate load a single thread costs less CPU per job (no cross-thread wake-ups); one
//! per core gives the most throughput when saturated (docs/performance.md has the figures).
//! Alternatives (a thread per core with connections pinned to it) are measured by the
//! speed work; whichever wins is chosen here, so no front end depends on it.

/// Threads serving connections: `configured`, else `JOBYARD_THREADS` (which the
/// beanstalkd and gearmand command lines also honour), else one per core.
pub fn threads(configured: Option<usize>) -> usize {
    configured
        .or_else(|| std::env::var("JOBYARD_THREADS").ok()?.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The runtime every front end runs on.
pub fn build(configured_threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads(configured_threads))
        .enable_all()
        .thread_name("jobyard")
        .build()
}
