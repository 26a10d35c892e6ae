//! Feeds arbitrary bytes, split at arbitrary points, to the jobd EOT/JSON decoder and the
//! connection rules: nothing may panic, buffered input never exceeds the frame cap plus one
//! read, and after an oversized frame the decoder yields nothing more.
#![no_main]

use bytes::BytesMut;
use jobyard_jobd::connection::{Action, ConnectionRules};
use jobyard_jobd::protocol::{Decoder, Incoming};
use libfuzzer_sys::fuzz_target;

const MAX_FRAME: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let chunk = (split as usize % 64) + 1;
    let mut decoder = Decoder::new(MAX_FRAME);
    let mut rules = ConnectionRules::new(Some("pw".into()), split & 1 == 0);
    let mut buf = BytesMut::new();
    let mut failed = false;
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        while let Some(msg) = decoder.decode(&mut buf) {
            assert!(!failed, "output after a fatal frame");
            if matches!(msg, Incoming::TooLarge(_)) {
                failed = true;
            }
            if let Action::Write(bytes) | Action::WriteAndClose(bytes) = rules.decide(msg) {
                assert_eq!(bytes.last(), Some(&4u8));
            }
        }
        assert!(buf.len() <= MAX_FRAME + chunk);
    }
});
