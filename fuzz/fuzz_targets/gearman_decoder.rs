//! Feeds arbitrary bytes, split at arbitrary points, to the Gearman decoder and then to the
//! field splitter and the admin parser: nothing may panic, and unparsed input never grows
//! beyond one packet of the configured maximum (or one admin line).
#![no_main]

use bytes::BytesMut;
use jobyard_gearman::decode::{Decoder, Frame, MAX_LINE};
use jobyard_gearman::packet::{request_fields, split_fields, HEADER};
use libfuzzer_sys::fuzz_target;

const MAX_PACKET: u32 = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let chunk = (split as usize % 64) + 1;
    let mut decoder = Decoder::new(MAX_PACKET);
    let mut buf = BytesMut::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        while let Some(frame) = decoder.decode(&mut buf) {
            match frame {
                Frame::Packet { kind, body, .. } => {
                    assert!(body.len() <= MAX_PACKET as usize);
                    if let Some(n) = request_fields(kind) {
                        if let Some(fields) = split_fields(&body, n) {
                            assert_eq!(fields.len(), n);
                        }
                    }
                }
                Frame::Line(line) => {
                    let _ = jobyard_gearman::admin::parse(&line);
                }
                Frame::Fatal(_) => return,
            }
        }
        assert!(buf.len() <= (HEADER + MAX_PACKET as usize).max(MAX_LINE + 1) + chunk);
    }
});
