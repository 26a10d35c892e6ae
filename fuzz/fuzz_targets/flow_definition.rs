//! Feeds arbitrary bytes to the flow-definition parser (JSON from the API, the same
//! validation as the TOML config) and to the flow log record decoder with replay: any
//! input gives a definition or an error, never a panic; an accepted definition survives a
//! round trip; a replayed record leaves an engine that still answers.
#![no_main]

use jobyard_engine::flows::{FlowChange, FlowDefinition};
use jobyard_engine::EngineCore;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(def) = FlowDefinition::parse_json(data) {
        let text = serde_json::to_vec(&def).expect("serializes");
        assert_eq!(FlowDefinition::parse_json(&text).as_ref(), Ok(&def));
    }
    if FlowChange::decode(data).is_some() {
        let mut engine = EngineCore::new();
        engine.replay(jobyard_engine::Change::Flow(bytes::Bytes::copy_from_slice(data)));
        engine.tick(u64::MAX / 2);
        let _ = engine.snapshot();
    }
});
