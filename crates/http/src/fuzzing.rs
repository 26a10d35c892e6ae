//! Entry points for the fuzz targets (fuzz/fuzz_targets/http_request.rs and
//! http_flow_request.rs): every decoder of the bytes a client sends, called exactly as the
//! handlers call them.

use jobyard_engine::flows::FlowDefinition;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::{job_id, parse_json};
use crate::flows::jobs::CreateRequest;
use crate::flows::work::{
    CompleteRequest as FlowCompleteRequest, DelayRequest, FailRequest as FlowFailRequest,
    StageLeaseRequest,
};
use crate::jobs::PutRequest;
use crate::leases::{
    CompleteRequest, FailRequest, HeartbeatRequest, LeaseRequest, ReleaseRequest, RouteRequest,
};
use crate::queues::{check_queue_name, parse_cursor};

/// Decodes and checks `body` as the request body of one kind of request (`which`
/// picks it), or `body` as path and query values; a refusal is an [`ApiError`].
pub fn decode(which: u8, body: &[u8], max_job_size: u32) -> Result<(), ApiError> {
    match which % 8 {
        0 => parse_json::<PutRequest>(body)?
            .checked(max_job_size)
            .map(drop),
        1 => parse_json::<LeaseRequest>(body)?.checked().map(drop),
        2 => parse_json::<HeartbeatRequest>(body)?.checked().map(drop),
        3 => parse_json::<CompleteRequest>(body)?
            .checked(max_job_size)
            .map(drop),
        4 => parse_json::<FailRequest>(body)?
            .checked(max_job_size)
            .map(drop),
        5 => parse_json::<ReleaseRequest>(body).map(drop),
        6 => parse_json::<RouteRequest>(body)?.checked().map(drop),
        _ => {
            let text = String::from_utf8_lossy(body);
            let _ = job_id(&text);
            let _ = parse_cursor(&text);
            check_queue_name(&text)
        }
    }
}

/// Decodes and checks `body` as one kind of flow request body (`which` picks it:
/// definition, create, stage lease, heartbeat, complete, fail, delay); a refusal is an
/// [`ApiError`].
pub fn decode_flow(which: u8, body: &[u8]) -> Result<(), ApiError> {
    match which % 7 {
        0 => {
            let value: Value = parse_json(body)?;
            let text = serde_json::to_vec(&value).expect("a JSON value serializes");
            FlowDefinition::parse_json(&text)
                .map(drop)
                .map_err(Into::into)
        }
        1 => parse_json::<CreateRequest>(body)?
            .checked("flow".into())
            .map(drop),
        2 => parse_json::<StageLeaseRequest>(body)?.checked().map(drop),
        3 => parse_json::<HeartbeatRequest>(body)?.checked().map(drop),
        4 => parse_json::<FlowCompleteRequest>(body)?.checked().map(drop),
        5 => parse_json::<FlowFailRequest>(body)?.checked().map(drop),
        _ => parse_json::<DelayRequest>(body)?
            .checked(1_700_000_000_000)
            .map(drop),
    }
}
