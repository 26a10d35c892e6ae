//! The thread model, decided here and nowhere else.
//!
//! At moderate load a single thread costs less CPU per job (no cross-thread wake-ups); the
//! work-stealing runtime with one thread per core gives the most throughput when saturated
//! (docs/performance.md has the figures). Two models:
//!
//! - fixed: every connection on tokio's multi-threaded runtime (`--threads N` threads);
//! - adaptive: byte-stream connections on one thread while it keeps up, moved to the
//!   multi-threaded runtime when it saturates and back when the load falls
//!   ([`crate::placement`]).
//!
//! Whichever is chosen is chosen here, so no front end depends on it.

use std::str::FromStr;
use std::sync::Arc;

use crate::placement::{Placement, Policy};

/// How connections are spread over threads (`--thread-model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// The multi-threaded runtime for everything.
    Fixed,
    /// One thread while it keeps up, the multi-threaded runtime when it does not.
    Adaptive,
}

/// The model when none is set and `--threads` is not given either.
pub const DEFAULT_MODEL: Model = Model::Adaptive;

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        match s {
            "fixed" => Ok(Model::Fixed),
            "adaptive" => Ok(Model::Adaptive),
            _ => Err(format!("thread model {s:?}: expected fixed or adaptive")),
        }
    }
}

/// Threads serving connections: `configured`, else `JOBYARD_THREADS` (which the
/// beanstalkd and gearmand command lines also honour), else one per core.
pub fn threads(configured: Option<usize>) -> usize {
    configured_threads(configured)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn configured_threads(configured: Option<usize>) -> Option<usize> {
    configured
        .or_else(|| std::env::var("JOBYARD_THREADS").ok()?.parse().ok())
        .filter(|&n| n > 0)
}

/// The model to run: `configured`, else `JOBYARD_THREAD_MODEL`, else fixed when a thread
/// count is set (`--threads N` keeps meaning N threads for everything), else the default.
pub fn model(configured: Option<Model>, thread_count: Option<usize>) -> Model {
    configured
        .or_else(|| std::env::var("JOBYARD_THREAD_MODEL").ok()?.parse().ok())
        .unwrap_or(match configured_threads(thread_count) {
            Some(_) => Model::Fixed,
            None => DEFAULT_MODEL,
        })
}

/// The runtime every front end runs on, and with the adaptive model the placement that
/// moves byte-stream connections between it and a thread of their own.
pub struct Runtimes {
    /// The multi-threaded runtime: accept loops, HTTP, WMP, jobd, the broker's tasks.
    pub main: tokio::runtime::Runtime,
    /// With the adaptive model: where byte-stream connections go (hand it to the `Gate`).
    pub placement: Option<Arc<Placement>>,
}

/// Builds the runtimes of `model` (see [`model`]).
pub fn build(thread_count: Option<usize>, model: Model) -> std::io::Result<Runtimes> {
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads(thread_count))
        .enable_all()
        .thread_name("jobyard")
        .build()?;
    let placement = match model {
        Model::Fixed => None,
        Model::Adaptive => {
            let placement = Placement::start(main.handle().clone())?;
            placement.watch_load(Policy::default());
            Some(placement)
        }
    };
    Ok(Runtimes { main, placement })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_count_means_the_fixed_model_unless_a_model_is_named() {
        assert_eq!(model(Some(Model::Adaptive), Some(4)), Model::Adaptive);
        assert_eq!(model(Some(Model::Fixed), None), Model::Fixed);
        if std::env::var_os("JOBYARD_THREAD_MODEL").is_none() {
            assert_eq!(
                model(None, Some(2)),
                Model::Fixed,
                "--threads N keeps N threads"
            );
        }
        assert_eq!("adaptive".parse(), Ok(Model::Adaptive));
        assert!("pinned".parse::<Model>().unwrap_err().contains("pinned"));
    }
}
