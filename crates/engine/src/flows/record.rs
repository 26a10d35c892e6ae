//! A flow job's record, and the log record of a flow transition.
//!
//! A flow transition (create, complete with routing or fan-in, fail, delete, ...) may change
//! several flow jobs at once: a child's end updates its parent. It is logged as one
//! [`crate::Change::Flow`] record holding every changed job whole, so a crash can never keep
//! half of it, and replaying a record sets those jobs outright (no order between records of
//! different jobs matters, which also makes the records safe in a fuzzy snapshot).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::flows::FlowDefinition;
use crate::{JobId, Millis};

/// Where a flow job is, as logged. A lease is not logged (a restart hands the job out
/// again), so a leased job is `Waiting` in its record; reads ask the engine for "leased".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowStatus {
    /// In its stage's queue, ready (or leased).
    Waiting,
    /// In its stage's queue, not handed out before `ready_at`.
    Delayed,
    /// Its stage fanned out; it moves on when the last child ends.
    WaitingChildren,
    /// Finished: the last stage completed.
    Done,
    /// Finished: a stage failed past its retries.
    Failed,
}

impl FlowStatus {
    /// The word the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowStatus::Waiting => "waiting",
            FlowStatus::Delayed => "delayed",
            FlowStatus::WaitingChildren => "waiting_children",
            FlowStatus::Done => "done",
            FlowStatus::Failed => "failed",
        }
    }

    /// Whether the job has ended (and so counts down its retention).
    pub fn is_end(self) -> bool {
        matches!(self, FlowStatus::Done | FlowStatus::Failed)
    }
}

/// One flow job: the shared JSON state every stage reads and writes, and where it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowJob {
    /// `<flow>:<uuidv7>`, or `<stage>:<child>:<uuidv7>` for a child.
    pub id: String,
    /// The flow whose definition the job follows (a child follows its parent's).
    pub flow: String,
    /// The engine job that stands for it in its stage's queue; the same for its whole life.
    pub engine_id: JobId,
    /// Its current stage (`<stage>:<child>` for a child), or the last one once ended.
    pub stage: String,
    pub status: FlowStatus,
    /// 1 is the most urgent.
    pub priority: u32,
    /// The fencing token of its latest lease; every lease takes the next one.
    pub token: u32,
    /// When a delayed job is ready again.
    #[serde(default)]
    pub ready_at: Millis,
    /// The job state (Guild's job hash): parameters, results and the special fields.
    pub fields: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Children of the current fan-out, in the order of their results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// Children of the current fan-out that have not ended.
    #[serde(default)]
    pub pending_children: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// `(attribute, value)` lookup entries, kept so removal finds them whatever the
    /// definition says by then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lookups: Vec<(String, String)>,
    pub created: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Millis>,
    /// Seconds the job is kept after its end (the flow's retention when it was created).
    #[serde(default)]
    pub retention_sec: u64,
}

impl FlowJob {
    /// The per-stage retry counter Guild keeps as `retries:<stage>`.
    pub fn retries(&self) -> u64 {
        self.fields
            .get(&format!("retries:{}", self.stage))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }
}

/// The payload of a [`crate::Change::Flow`] log record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowChange {
    /// A flow was declared (or declared again, replacing the old definition).
    Define(FlowDefinition),
    /// These jobs are now exactly as given, and these are gone.
    Jobs {
        #[serde(default)]
        put: Vec<FlowJob>,
        #[serde(default)]
        gone: Vec<String>,
    },
    /// A job was handed out under this fencing token (nothing else changed).
    Token { id: String, token: u32 },
}

impl FlowChange {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("flow records serialize")
    }

    /// Reads a record back; `None` if the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<FlowChange> {
        serde_json::from_slice(bytes).ok()
    }
}

/// A UUIDv7 text for a new job id: the 48-bit millisecond time first (so ids sort by
/// creation time), then bits made from the job's engine id, which is unique and never
/// reused, so the text is unique without a random source (the engine stays deterministic).
pub fn uuid_v7(now: Millis, unique: u64) -> String {
    let mix = splitmix64(unique);
    let hi: u64 = ((now & 0xFFFF_FFFF_FFFF) << 16) | 0x7000 | (mix & 0x0FFF);
    let lo: u64 = 0x8000_0000_0000_0000 | (unique & 0x3FFF_FFFF_FFFF_FFFF);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xFFFF,
        hi & 0xFFFF,
        lo >> 48,
        lo & 0xFFFF_FFFF_FFFF
    )
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_have_the_v7_shape_and_differ() {
        let a = uuid_v7(1_700_000_000_000, 1);
        let b = uuid_v7(1_700_000_000_000, 2);
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "7");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }
}
