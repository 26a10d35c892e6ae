//! The values the API hands back and takes, typed, with bytes decoded from JSON's two
//! forms (a UTF-8 string, or base64 for anything else).

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::error::Error;
use crate::worker::{now_ms, Failure, Leased};

/// A job's id: shared by every protocol (the beanstalkd id, the Gearman handle's number).
pub type JobId = u64;

/// How to put a job; every field has the server's default when absent.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// 0 is the most urgent; the server's default is 1024.
    pub priority: Option<u32>,
    /// Seconds before the job is ready.
    pub delay: Option<u32>,
    /// Seconds a lease lasts unless a worker asks otherwise.
    pub ttr: Option<u32>,
    /// Any JSON kept beside the job and handed to the worker with it.
    pub attributes: Option<Value>,
}

/// A leased job, as a worker's handler receives it.
#[derive(Debug, Clone)]
pub struct Job {
    /// Its id.
    pub id: JobId,
    /// The queue it was leased from.
    pub queue: String,
    /// The fencing token every call about this lease must carry.
    pub token: u64,
    /// Its priority.
    pub priority: u32,
    /// The body, as put.
    pub body: Bytes,
    /// Its attributes (`null` when none).
    pub attributes: Value,
    /// How long the lease lasts from its last heartbeat, in milliseconds.
    pub lease_ms: u64,
}

/// How a job ended, or that it has not ended yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Completed, with its result.
    Ok(Bytes),
    /// Failed, with the worker's error text if it gave one.
    Failed(Option<String>),
    /// Deleted (by any protocol) before or instead of completing.
    Deleted,
    /// Still running or waiting; its current state.
    Pending(String),
}

/// Puts `bytes` into `obj` under `key` (UTF-8) or `key_base64`.
pub(crate) fn put_bytes(obj: &mut Map<String, Value>, key: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => obj.insert(key.into(), json!(s)),
        Err(_) => obj.insert(
            format!("{key}_base64"),
            json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    };
}

/// Reads bytes from `obj[key]` or `obj[key_base64]`; absent is empty.
pub(crate) fn get_bytes(obj: &Value, key: &str) -> Result<Bytes, Error> {
    if let Some(s) = obj[key].as_str() {
        return Ok(Bytes::copy_from_slice(s.as_bytes()));
    }
    match obj[format!("{key}_base64")].as_str() {
        Some(b) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map(Bytes::from)
            .map_err(|e| Error::Protocol(format!("{key}_base64: {e}"))),
        None => Ok(Bytes::new()),
    }
}

/// A number the server always sends.
pub(crate) fn number(obj: &Value, key: &str) -> Result<u64, Error> {
    obj[key]
        .as_u64()
        .ok_or_else(|| Error::Protocol(format!("`{key}` missing in {obj}")))
}

impl Leased for Job {
    type Output = Bytes;

    fn from_lease(job: &Value) -> Result<Job, Error> {
        Ok(Job {
            id: number(job, "id")?,
            queue: job["queue"].as_str().unwrap_or_default().to_string(),
            token: number(job, "token")?,
            priority: number(job, "priority")? as u32,
            body: get_bytes(job, "body")?,
            attributes: job["attributes"].clone(),
            lease_ms: number(job, "lease_ms")?,
        })
    }

    fn path(&self) -> String {
        format!("/v1/jobs/{}", self.id)
    }

    fn token(&self) -> u64 {
        self.token
    }

    fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    fn put_output(output: Bytes, request: &mut Map<String, Value>) {
        put_bytes(request, "result", &output);
    }

    fn failure(failure: Failure, request: &mut Map<String, Value>) -> &'static str {
        let delay_secs = match failure {
            Failure::Fail(error) => {
                request.insert("error".into(), json!(error));
                return "fail";
            }
            Failure::Retry(delay) => delay.as_secs(),
            Failure::DelayUntil { ready_at_ms, .. } => ready_at_ms.saturating_sub(now_ms()) / 1000,
        };
        request.insert("delay".into(), json!(delay_secs));
        "release"
    }
}

impl Outcome {
    /// Reads a result reply.
    pub(crate) fn from_reply(reply: &Value) -> Result<Outcome, Error> {
        if reply["ended"] != json!(true) {
            let state = reply["state"].as_str().unwrap_or("unknown");
            return Ok(Outcome::Pending(state.to_string()));
        }
        match reply["status"].as_str() {
            Some("ok") => Ok(Outcome::Ok(get_bytes(reply, "result")?)),
            Some("failed") => Ok(Outcome::Failed(reply["error"].as_str().map(str::to_string))),
            Some("deleted") => Ok(Outcome::Deleted),
            other => Err(Error::Protocol(format!("unknown status {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_travel_as_text_or_base64_and_come_back_equal() {
        for bytes in [&b"plain"[..], &[0xff, 0x00, 0x80][..], b""] {
            let mut obj = Map::new();
            put_bytes(&mut obj, "body", bytes);
            let v = Value::Object(obj);
            assert_eq!(
                get_bytes(&v, "body").unwrap(),
                Bytes::copy_from_slice(bytes)
            );
        }
        let mut obj = Map::new();
        put_bytes(&mut obj, "body", &[0xff]);
        assert!(obj.contains_key("body_base64") && !obj.contains_key("body"));
    }

    #[test]
    fn outcomes_are_read_from_every_reply_shape() {
        let ok = json!({"id": 1, "ended": true, "status": "ok", "result": "r"});
        assert_eq!(Outcome::from_reply(&ok).unwrap(), Outcome::Ok("r".into()));
        let failed = json!({"id": 1, "ended": true, "status": "failed", "error": "boom"});
        assert_eq!(
            Outcome::from_reply(&failed).unwrap(),
            Outcome::Failed(Some("boom".into()))
        );
        let pending = json!({"id": 1, "ended": false, "state": "reserved"});
        assert_eq!(
            Outcome::from_reply(&pending).unwrap(),
            Outcome::Pending("reserved".into())
        );
        let odd = json!({"id": 1, "ended": true, "status": "exploded"});
        assert!(matches!(Outcome::from_reply(&odd), Err(Error::Protocol(_))));
    }
}
