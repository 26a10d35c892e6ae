//! Feeds arbitrary payloads to the log record decoder: any input gives a change or an
//! error, and a decoded change re-encodes to a frame that decodes to the same change.
#![no_main]

use jobyard_storage::{decode_change, encode_change};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(change) = decode_change(data) {
        let mut frame = Vec::new();
        encode_change(&change, &mut frame);
        assert_eq!(decode_change(&frame[8..]).as_ref(), Ok(&change));
    }
});
