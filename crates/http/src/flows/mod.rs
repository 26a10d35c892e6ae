//! Flows over the API (docs/http-api.md, "Flows"): the engine's multi-stage flow jobs
//! (`jobyard_engine::flows`) as routes.
//!
//! `definitions` declares, lists and describes flows; `jobs` creates, reads and deletes
//! flow jobs; `lookup` reads many flow jobs in one request; `work` is a flow worker's calls (stage lease, heartbeat, complete, fail,
//! delay), on the lease machinery plain jobs use (`leasing`); `errors` maps the engine's
//! refusals to API errors.

pub(crate) mod definitions;
mod errors;
pub(crate) mod jobs;
pub(crate) mod lookup;
pub(crate) mod work;
