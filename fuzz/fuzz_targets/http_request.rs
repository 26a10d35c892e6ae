//! Feeds arbitrary bytes to the HTTP API's request decoders (every JSON request body, and
//! path and query values), as the handlers call them: they must never panic, and a body
//! over the job size limit must be refused whatever its encoding.
#![no_main]

use jobyard_http::fuzzing::decode;
use libfuzzer_sys::fuzz_target;

const MAX_JOB: u32 = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let _ = decode(which, body, MAX_JOB);
});
