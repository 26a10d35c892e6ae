//! Request extractors whose refusals are API errors (JSON with a stable code) rather than
//! axum's plain-text rejections.

use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::Api;

/// A JSON request body. An empty body reads as `{}`, so endpoints whose fields are all
/// optional can be called without one.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Api> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, api: &Api) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, api).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::request_too_large(api.request_limit)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {e}"))
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A request body as `T`: what [`JsonBody`] does once the bytes are read. An empty (or
/// all-whitespace) body reads as `{}`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(text).map_err(|e| ApiError::bad_json(e.to_string()))
}

/// Query parameters.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<Api> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, api)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// A job id from the path.
pub fn job_id(text: &str) -> Result<u64, ApiError> {
    text.parse::<u64>()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| ApiError::bad_request(format!("{text:?} is not a job id")))
}

/// One path parameter, as text (each handler parses and checks it).
pub struct PathText(pub String);

impl FromRequestParts<Api> for PathText {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Self, ApiError> {
        axum::extract::Path::<String>::from_request_parts(parts, api)
            .await
            .map(|axum::extract::Path(p)| PathText(p))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}
