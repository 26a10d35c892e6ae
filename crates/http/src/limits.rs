//! Every bound the HTTP front end puts on what a client sends or asks for. Each one is in
//! docs/http-api.md ("Limits") and has a test in tests/http/test_limits.py.

/// Path plus query string, in bytes (longer: 414 `uri_too_long`).
pub const MAX_URI_BYTES: usize = 4096;
/// A queue name, in bytes: beanstalkd's tube name limit, so every queue is reachable from
/// every protocol.
pub const MAX_QUEUE_NAME_BYTES: usize = 200;
/// Job attributes once serialized as JSON.
pub const MAX_ATTRIBUTES_BYTES: usize = 64 << 10;
/// Queues one lease request may take from.
pub const MAX_LEASE_QUEUES: usize = 32;
/// The longest lease a request may ask for (one day).
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// The longest a lease or result request may wait (a long poll).
pub const MAX_WAIT_MS: u64 = 60_000;
/// Jobs or queues in one page of a listing.
pub const MAX_PAGE: usize = 1000;
/// Flow job ids in one lookup (`POST /v1/flow-jobs/lookup`): what one reply may carry,
/// as a page of a listing.
pub const MAX_LOOKUP_IDS: usize = 1000;
/// Jobs or queues in a page when the request does not say.
pub const DEFAULT_PAGE: usize = 100;
/// Bytes of a body shown in a job's description.
pub const BODY_PREVIEW_BYTES: usize = 256;
/// A flow job's parameters, or one stage's result, once serialized as JSON.
pub const MAX_FIELDS_BYTES: usize = 256 << 10;
/// A flow job's idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 200;
/// How far ahead a flow job may be delayed (one year).
pub const MAX_DELAY_MS: u64 = 366 * 86_400_000;
/// Room in a request body for everything besides the job body (attributes, fields).
const REQUEST_OVERHEAD: usize = 256 << 10;

/// The largest request body read, for a job size limit of `max_job_size`: room for a body of
/// that size in any encoding (JSON escapes make a string up to 6 times longer, base64 4/3),
/// plus attributes and the other fields. Larger: 413 `request_too_large`.
pub fn max_request_bytes(max_job_size: u32) -> usize {
    (max_job_size as usize).saturating_mul(6) + REQUEST_OVERHEAD
}
