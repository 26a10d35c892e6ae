//! How the engine's refusals of flow operations show in the API: a status and a stable
//! code each (docs/http-api.md, "Flows").

use axum::http::StatusCode;
use jobyard_engine::flows::{DefinitionError, FlowError};

use crate::error::ApiError;

impl From<FlowError> for ApiError {
    fn from(e: FlowError) -> ApiError {
        let message = e.to_string();
        let (status, code) = match e {
            FlowError::UnknownFlow(_) => (StatusCode::NOT_FOUND, "unknown_flow"),
            FlowError::UnknownStage(_) => (StatusCode::NOT_FOUND, "unknown_stage"),
            FlowError::BadPriority { .. } => (StatusCode::BAD_REQUEST, "bad_priority"),
            FlowError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            FlowError::NotLeased(_) => (StatusCode::CONFLICT, "not_leased"),
            FlowError::StaleToken { .. } => (StatusCode::CONFLICT, "stale_token"),
            FlowError::Invalid(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        };
        ApiError::new(status, code, message)
    }
}

impl From<DefinitionError> for ApiError {
    fn from(e: DefinitionError) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_definition", e.0)
    }
}
