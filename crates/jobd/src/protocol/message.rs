//! The three kinds of message a connection reads, once validated.

use serde_json::{Number, Value};

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The client's request number, echoed verbatim in the reply.
    pub no: Number,
    /// The request type, e.g. `poll`.
    pub kind: String,
    /// Arguments; falsy values (`null`, `0`, `""`) become `{}` as in jobd.
    pub data: Value,
    /// Only looked at on an unauthorised connection's first request.
    pub password: Option<String>,
}

/// A validated response.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The number of the request this answers (0 = "your message could not be parsed").
    pub no: Number,
    /// The result on success.
    pub data: Option<Value>,
    /// The error message on failure.
    pub error: Option<String>,
}

/// One decoded message, or why it could not be one.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A well-formed request.
    Request(Request),
    /// A well-formed response.
    Response(Response),
    /// `[2]`.
    Ping,
    /// `[3]`.
    Pong,
    /// Not a valid message: the text is sent back as a `no: 0` error; the stream goes on.
    Invalid(String),
    /// The frame exceeded the cap: reply with the text, then close (the stream is lost).
    TooLarge(String),
}
