//! Entry points for the flow fuzz target (fuzz/fuzz_targets/http_flow_request.rs): every
//! decoder of a flow request body, called exactly as the handlers call it.

use jobyard_engine::flows::FlowDefinition;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::parse_json;
use crate::flow_jobs::CreateRequest;
use crate::flow_work::{CompleteRequest, DelayRequest, FailRequest, StageLeaseRequest};
use crate::leases::HeartbeatRequest;

/// Decodes and checks `body` as one kind of flow request body (`which` picks it); a
/// refusal is an [`ApiError`].
pub fn decode(which: u8, body: &[u8]) -> Result<(), ApiError> {
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
        4 => parse_json::<CompleteRequest>(body)?.checked().map(drop),
        5 => parse_json::<FailRequest>(body)?.checked().map(drop),
        _ => parse_json::<DelayRequest>(body)?
            .checked(1_700_000_000_000)
            .map(drop),
    }
}
