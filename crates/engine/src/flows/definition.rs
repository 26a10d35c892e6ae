//! Flow definitions: what a flow's stages are and how a job moves between them.
//!
//! A definition comes from the server's TOML config or from the API as JSON; both go
//! through [`FlowDefinition::parse_json`] / [`FlowDefinition::validate`], so a flow that
//! routes to a stage it does not declare, or has a priority out of range, is refused with a
//! message naming the field before anything is stored. Field names follow Guild Queues'
//! `QueueOptions` (camelCase), so its users recognise them.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

/// Largest definition accepted, as JSON bytes: bounds the parser's work and the log record.
pub const MAX_DEFINITION_BYTES: usize = 64 * 1024;
/// Most stages (children included) one flow may declare.
pub const MAX_STAGES: usize = 64;
/// Longest flow, stage or attribute name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Most priority levels a stage may have (priority 1 is the most urgent).
pub const MAX_PRIORITIES: u32 = 100;
/// Most retries a stage may allow.
pub const MAX_RETRIES: u32 = 1000;
/// Longest backoff, lease and retention, so sums of times cannot overflow.
pub const MAX_BACKOFF_MS: u64 = 24 * 3600 * 1000;
/// Longest lease a stage may default to.
pub const MAX_LEASE_MS: u64 = 24 * 3600 * 1000;
/// Longest retention of a finished job.
pub const MAX_RETENTION_SEC: u64 = 366 * 24 * 3600;
/// Most attributes a stage hands its worker, or a flow indexes.
pub const MAX_ATTRIBUTES: usize = 256;
/// Default lease of a stage: Guild's default `lockTimeSec` of 180 s.
pub const DEFAULT_LEASE_MS: u64 = 180_000;
/// Default retention of a finished job: Guild's default key expiry of 24 h.
pub const DEFAULT_RETENTION_SEC: u64 = 24 * 3600;

/// A rate limit on a stage: at most `reservoir` hand-outs per `intervalMs` window, counted
/// per value of the job field `groupJobKey` (one count for all jobs when absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limiter {
    pub reservoir: u32,
    pub interval_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_job_key: Option<String>,
}

/// One stage (a queue) of a flow, or a child stage of a stage that fans out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StageDefinition {
    pub name: String,
    /// The stage a completed job moves to unless its result names one (`nextQueue`);
    /// none: completing here finishes the flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Added to the job's priority when it moves on from this stage (Guild's
    /// `nextQueuePriorityDiffMap` for this flow); the result is kept within the next
    /// stage's priorities.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority_diff: i32,
    /// Priority levels: a job here has priority 1 (most urgent) to `priorities`.
    #[serde(default = "one")]
    pub priorities: u32,
    /// Job fields handed to the worker with a lease (besides `id`, `retries` and the
    /// defaults `flowName`, `priority`, `correlationId`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes_to_get: Vec<String>,
    /// Failures retried before the job is recorded as failed.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_retries: u32,
    /// Wait before a retry: `backoffMs × 2^(retry − 1)`, capped at [`MAX_BACKOFF_MS`].
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub backoff_ms: u64,
    /// Lease length when the worker does not name one.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Whether a worker may delay a job of this stage (Guild's `DelayError`).
    #[serde(default = "yes")]
    pub delayable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limiter: Option<Limiter>,
    /// Child stages: a job entering this stage fans out into one child job per entry of
    /// its `children:<stage>:params` field, and moves on when the last child ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<StageDefinition>,
}

/// A flow: named stages sharing one JSON job state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowDefinition {
    pub name: String,
    /// Job fields indexed for lookups (an array value is indexed per element).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lookup_attributes: Vec<String>,
    /// How long a finished job (and its children and lookup entries) is kept after its end.
    #[serde(default = "default_retention_sec")]
    pub retention_sec: u64,
    /// The stages; a new job enters the first.
    pub stages: Vec<StageDefinition>,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_lease_ms() -> u64 {
    DEFAULT_LEASE_MS
}
fn default_retention_sec() -> u64 {
    DEFAULT_RETENTION_SEC
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// Why a definition was refused: a sentence naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefinitionError(pub String);

impl std::fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DefinitionError {}

fn refuse<T>(message: String) -> Result<T, DefinitionError> {
    Err(DefinitionError(message))
}

/// Whether `name` may name a flow, stage or child: letters, digits, `-`, `_`, `.`. Not `:`,
/// which separates the parts of job ids and child stage names.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn check_name(what: &str, name: &str) -> Result<(), DefinitionError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        refuse(format!(
            "{what} {name:?} is not a valid name (1 to {MAX_NAME_BYTES} letters, digits, '-', '_' or '.')"
        ))
    }
}

impl FlowDefinition {
    /// Parses and validates a definition sent as JSON.
    pub fn parse_json(bytes: &[u8]) -> Result<FlowDefinition, DefinitionError> {
        if bytes.len() > MAX_DEFINITION_BYTES {
            return refuse(format!(
                "a flow definition is at most {MAX_DEFINITION_BYTES} bytes"
            ));
        }
        let def: FlowDefinition = serde_json::from_slice(bytes)
            .map_err(|e| DefinitionError(format!("not a flow definition: {e}")))?;
        def.validate()?;
        Ok(def)
    }

    /// Checks every rule a definition must meet; see the module doc.
    pub fn validate(&self) -> Result<(), DefinitionError> {
        check_name("flow", &self.name)?;
        if self.stages.is_empty() {
            return refuse(format!("flow {:?} declares no stages", self.name));
        }
        if self.lookup_attributes.len() > MAX_ATTRIBUTES {
            return refuse(format!(
                "lookupAttributes has more than {MAX_ATTRIBUTES} entries"
            ));
        }
        for attr in &self.lookup_attributes {
            check_attribute("lookupAttributes", attr)?;
        }
        if self.retention_sec > MAX_RETENTION_SEC {
            return refuse(format!("retentionSec is at most {MAX_RETENTION_SEC}"));
        }
        let total: usize = self.stages.iter().map(|s| 1 + s.children.len()).sum();
        if total > MAX_STAGES {
            return refuse(format!(
                "a flow has at most {MAX_STAGES} stages, children included"
            ));
        }
        let mut names = HashSet::new();
        for stage in &self.stages {
            check_name("stage", &stage.name)?;
            if !names.insert(stage.name.as_str()) {
                return refuse(format!("stage {:?} is declared twice", stage.name));
            }
        }
        for stage in &self.stages {
            stage.validate(&stage.name)?;
            if let Some(next) = &stage.next {
                if !names.contains(next.as_str()) {
                    return refuse(format!(
                        "stage {:?} routes to {next:?}, which flow {:?} does not declare",
                        stage.name, self.name
                    ));
                }
            }
            let mut children = HashSet::new();
            for child in &stage.children {
                check_name("child", &child.name)?;
                if !children.insert(child.name.as_str()) {
                    return refuse(format!(
                        "stage {:?} declares child {:?} twice",
                        stage.name, child.name
                    ));
                }
                let label = format!("{}:{}", stage.name, child.name);
                child.validate(&label)?;
                if child.next.is_some() || !child.children.is_empty() || child.priority_diff != 0 {
                    return refuse(format!(
                        "child stage {label:?} may not have next, priorityDiff or children of its own"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The stage of this name, top-level (`access-check`) or child (`access-check:requirement`).
    pub fn stage(&self, name: &str) -> Option<&StageDefinition> {
        match name.split_once(':') {
            None => self.stages.iter().find(|s| s.name == name),
            Some((parent, child)) => self
                .stages
                .iter()
                .find(|s| s.name == parent)?
                .children
                .iter()
                .find(|c| c.name == child),
        }
    }

    /// Every stage name, children as `<parent>:<child>`.
    pub fn stage_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for stage in &self.stages {
            names.push(stage.name.clone());
            for child in &stage.children {
                names.push(format!("{}:{}", stage.name, child.name));
            }
        }
        names
    }
}

fn check_attribute(field: &str, attr: &str) -> Result<(), DefinitionError> {
    if attr.is_empty() || attr.len() > MAX_NAME_BYTES {
        return refuse(format!(
            "{field} has an attribute name that is empty or longer than {MAX_NAME_BYTES} bytes"
        ));
    }
    Ok(())
}

impl StageDefinition {
    fn validate(&self, label: &str) -> Result<(), DefinitionError> {
        if !(1..=MAX_PRIORITIES).contains(&self.priorities) {
            return refuse(format!(
                "stage {label:?}: priorities is 1 to {MAX_PRIORITIES}, not {}",
                self.priorities
            ));
        }
        if self.priority_diff.unsigned_abs() >= MAX_PRIORITIES {
            return refuse(format!(
                "stage {label:?}: priorityDiff is between -{0} and {0}",
                MAX_PRIORITIES - 1
            ));
        }
        if self.max_retries > MAX_RETRIES {
            return refuse(format!(
                "stage {label:?}: maxRetries is at most {MAX_RETRIES}"
            ));
        }
        if self.backoff_ms > MAX_BACKOFF_MS {
            return refuse(format!(
                "stage {label:?}: backoffMs is at most {MAX_BACKOFF_MS}"
            ));
        }
        if !(1..=MAX_LEASE_MS).contains(&self.lease_ms) {
            return refuse(format!("stage {label:?}: leaseMs is 1 to {MAX_LEASE_MS}"));
        }
        if self.attributes_to_get.len() > MAX_ATTRIBUTES {
            return refuse(format!(
                "stage {label:?}: attributesToGet has more than {MAX_ATTRIBUTES} entries"
            ));
        }
        for attr in &self.attributes_to_get {
            check_attribute("attributesToGet", attr)?;
        }
        if let Some(limiter) = &self.limiter {
            if limiter.reservoir == 0 || !(1..=MAX_BACKOFF_MS).contains(&limiter.interval_ms) {
                return refuse(format!(
                    "stage {label:?}: the limiter needs reservoir ≥ 1 and intervalMs 1 to {MAX_BACKOFF_MS}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FlowDefinition, DefinitionError> {
        FlowDefinition::parse_json(text.as_bytes())
    }

    #[test]
    fn a_linear_flow_with_children_is_accepted_with_defaults() {
        let def = parse(
            r#"{"name":"access","lookupAttributes":["userId"],"stages":[
                {"name":"prep","next":"check"},
                {"name":"check","next":"result","children":[{"name":"req","maxRetries":2}]},
                {"name":"result"}]}"#,
        )
        .unwrap();
        assert_eq!(def.stages[0].priorities, 1);
        assert_eq!(def.stages[0].lease_ms, DEFAULT_LEASE_MS);
        assert_eq!(def.retention_sec, DEFAULT_RETENTION_SEC);
        assert_eq!(def.stage("check:req").unwrap().max_retries, 2);
        assert_eq!(def.stage_names(), ["prep", "check", "check:req", "result"]);
    }

    #[test]
    fn a_route_to_an_undeclared_stage_is_refused_by_name() {
        let err = parse(r#"{"name":"f","stages":[{"name":"a","next":"b"}]}"#).unwrap_err();
        assert!(err.0.contains("routes to \"b\""), "{err}");
    }

    #[test]
    fn bad_priorities_are_refused() {
        for stage in [
            r#"{"name":"a","priorities":0}"#,
            r#"{"name":"a","priorities":101}"#,
            r#"{"name":"a","priorityDiff":100}"#,
        ] {
            let text = format!(r#"{{"name":"f","stages":[{stage}]}}"#);
            assert!(parse(&text).is_err(), "{text}");
        }
    }

    #[test]
    fn names_duplicates_and_unknown_fields_are_refused() {
        for text in [
            r#"{"name":"","stages":[{"name":"a"}]}"#,
            r#"{"name":"f:g","stages":[{"name":"a"}]}"#,
            r#"{"name":"f","stages":[]}"#,
            r#"{"name":"f","stages":[{"name":"a"},{"name":"a"}]}"#,
            r#"{"name":"f","stages":[{"name":"a","nextQueue":"a"}]}"#,
            r#"{"name":"f","stages":[{"name":"a","children":[{"name":"c","next":"a"}]}]}"#,
            r#"{"name":"f","stages":[{"name":"a","children":[{"name":"c"},{"name":"c"}]}]}"#,
            r#"{"name":"f","stages":[{"name":"a","leaseMs":0}]}"#,
            r#"{"name":"f","stages":[{"name":"a","limiter":{"reservoir":0,"intervalMs":5}}]}"#,
            r#"{"name":"f","retentionSec":99999999999,"stages":[{"name":"a"}]}"#,
            r#"not json"#,
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn the_size_limit_holds_at_its_edge() {
        let pad = " ".repeat(MAX_DEFINITION_BYTES);
        let text = format!(r#"{{"name":"f","stages":[{{"name":"a"}}]}}{pad}"#);
        assert!(parse(&text[..MAX_DEFINITION_BYTES]).is_ok());
        assert!(parse(&text[..MAX_DEFINITION_BYTES + 1])
            .unwrap_err()
            .0
            .contains("at most"));
    }
}
