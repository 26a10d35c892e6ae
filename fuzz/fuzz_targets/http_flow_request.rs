//! Feeds arbitrary bytes to every flow request body decoder of the HTTP API (definition,
//! create, stage lease, heartbeat, complete, fail, delay): a body is accepted or refused
//! with an API error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&which, body)) = data.split_first() {
        let _ = jobyard_http::fuzzing::decode_flow(which, body);
    }
});
