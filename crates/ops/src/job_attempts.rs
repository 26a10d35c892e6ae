//! A job's attempts in the admin API's job view: each lease kept by the broker
//! (`jobyard_broker::attempts`) with when it began and ended, the session that held it,
//! how it ended and a failure's error text, plus the lease held now.

use jobyard_broker::{Attempt, Txn};
use jobyard_engine::{Job, JobId, JobState};
use serde_json::{json, Value};

/// One attempt as JSON.
fn attempt_json(a: &Attempt) -> Value {
    json!({
        "started_ms": a.started_ms,
        "ended_ms": a.ended_ms,
        "holder": a.holder,
        "ended": a.how.as_str(),
        "error": a.error.as_deref(),
    })
}

/// The attempts of a live job and the lease it is under now (null unless leased).
pub(crate) fn of_live_job(txn: &Txn<'_>, job: &Job) -> (Value, Value) {
    let attempts = txn.attempts(job.id).map_or_else(Vec::new, |(list, _)| {
        list.iter().map(attempt_json).collect()
    });
    let lease = match (job.state, txn.lease_began_ms(job.id)) {
        (JobState::Reserved, Some(started_ms)) => {
            json!({ "holder": job.owner, "started_ms": started_ms })
        }
        _ => Value::Null,
    };
    (Value::Array(attempts), lease)
}

/// The last attempts of a job that has ended, while the broker still keeps them.
pub(crate) fn of_ended_job(txn: &Txn<'_>, id: JobId) -> Option<Value> {
    match txn.attempts(id)? {
        (list, true) => Some(Value::Array(list.iter().map(attempt_json).collect())),
        (_, false) => None,
    }
}
