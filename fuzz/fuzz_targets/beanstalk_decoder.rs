//! Feeds arbitrary bytes, split at arbitrary points, to the beanstalkd decoder: it must
//! never panic, and must never buffer more than one line or one body.
#![no_main]

use bytes::BytesMut;
use jobyard_beanstalk::command::MAX_LINE;
use jobyard_beanstalk::decode::Decoder;
use libfuzzer_sys::fuzz_target;

const MAX_JOB: u32 = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let chunk = (split as usize % 64) + 1;
    let mut decoder = Decoder::new(MAX_JOB);
    let mut buf = BytesMut::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        while decoder.decode(&mut buf).is_some() {}
        assert!(buf.len() <= MAX_LINE.max(MAX_JOB as usize + 2) + chunk);
    }
});
