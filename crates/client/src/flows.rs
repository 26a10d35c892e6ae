//! Flows: declare them, create jobs, read them back, and run stage workers. A stage
//! worker's handler gets what a Guild worker function gets (`{id, ...attributesToGet,
//! retries}`) and returns the fields to merge, with an optional `nextQueue`.

use serde_json::{json, Map, Value};

use crate::error::Error;
use crate::types::number;
use crate::worker::{now_ms, Failure, Leased, WorkerBuilder};
use crate::{encode_segment, Client};

/// How to create a flow job.
#[derive(Debug, Clone, Default)]
pub struct FlowJobOptions {
    /// 1 is the most urgent (the default).
    pub priority: Option<u32>,
    /// Creating again with the same key returns the first job instead of a second one.
    pub idempotency_key: Option<String>,
}

/// A leased job of a flow stage.
#[derive(Debug, Clone)]
pub struct StageJob {
    /// `<flow>:<uuidv7>` (a child's is `<stage>:<child>:<uuidv7>`).
    pub id: String,
    /// The stage it was leased from.
    pub stage: String,
    /// The fencing token every call about this lease carries.
    pub token: u64,
    /// `{id, ...attributesToGet, retries, flowName, priority, correlationId}`.
    pub input: Value,
    /// How long the lease lasts from its last heartbeat, in milliseconds.
    pub lease_ms: u64,
}

impl Leased for StageJob {
    type Output = Value;
    const REPORT_LEASES_NEXT: bool = true;

    fn from_lease(job: &Value) -> Result<StageJob, Error> {
        let text = |k: &str| {
            job[k]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| Error::Protocol(format!("`{k}` missing in {job}")))
        };
        Ok(StageJob {
            id: text("id")?,
            stage: text("stage")?,
            token: number(job, "token")?,
            input: job["input"].clone(),
            lease_ms: number(job, "lease_ms")?,
        })
    }

    fn path(&self) -> String {
        format!("/v1/flow-jobs/{}", encode_segment(&self.id))
    }

    fn token(&self) -> u64 {
        self.token
    }

    fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    fn put_output(output: Value, request: &mut Map<String, Value>) {
        request.insert("result".into(), output);
    }

    fn failure(failure: Failure, request: &mut Map<String, Value>) -> &'static str {
        let (ready_at_ms, reason) = match failure {
            Failure::Fail(error) => {
                request.insert("error".into(), json!(error));
                return "fail";
            }
            Failure::Retry(delay) => (now_ms() + delay.as_millis() as u64, "retry".to_string()),
            Failure::DelayUntil {
                ready_at_ms,
                reason,
            } => (ready_at_ms, reason),
        };
        request.insert("ready_at_ms".into(), json!(ready_at_ms));
        request.insert("reason".into(), json!(reason));
        "delay"
    }
}

impl Client {
    /// Declares a flow (or replaces its definition): JSON as in docs/http-api.md "Flows".
    pub async fn declare_flow(&self, definition: &Value) -> Result<(), Error> {
        self.post("/v1/flows", definition).await.map(drop)
    }

    /// Creates a job in `flow`'s first stage with `params` as its state; returns its id.
    pub async fn create_flow_job(
        &self,
        flow: &str,
        params: Value,
        options: &FlowJobOptions,
    ) -> Result<String, Error> {
        let mut req = json!({ "params": params });
        if let Some(p) = options.priority {
            req["priority"] = json!(p);
        }
        if let Some(k) = &options.idempotency_key {
            req["idempotency_key"] = json!(k);
        }
        let path = format!("/v1/flows/{}/jobs", encode_segment(flow));
        let reply = self.post(&path, &req).await?;
        reply["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Error::Protocol(format!("no id in {reply}")))
    }

    /// A flow job: `{id, flow, stage, state, priority, fields, ...}`; `None` once purged
    /// or deleted.
    pub async fn flow_job(&self, id: &str) -> Result<Option<Value>, Error> {
        match self
            .get(&format!("/v1/flow-jobs/{}", encode_segment(id)))
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == Some("not_found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes a flow job with its children; `false` if it did not exist.
    pub async fn delete_flow_job(&self, id: &str) -> Result<bool, Error> {
        let path = format!("/v1/flow-jobs/{}", encode_segment(id));
        match self.delete_path(&path).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("not_found") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The jobs of `flow` whose lookup attribute `key` had `value` at creation.
    pub async fn flow_jobs_by_key(
        &self,
        flow: &str,
        key: &str,
        value: &str,
    ) -> Result<Vec<Value>, Error> {
        let path = format!(
            "/v1/flows/{}/jobs?key={}&value={}",
            encode_segment(flow),
            encode_segment(key),
            encode_segment(value)
        );
        let reply = self.get(&path).await?;
        Ok(reply["jobs"].as_array().cloned().unwrap_or_default())
    }

    /// Starts building a pool of workers for one flow stage (`<stage>:<child>` for a
    /// child stage).
    pub fn stage_worker(&self, stage: &str) -> WorkerBuilder<StageJob> {
        let path = format!("/v1/stages/{}/lease", encode_segment(stage));
        WorkerBuilder::new(self.clone(), path, Map::new())
    }
}
