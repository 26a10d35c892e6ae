//! The per-job lists of master run-manual and send-signal: read from requests in jobd's
//! order of checks, and merged from the workers' answers.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::protocol::validate;

pub(super) fn merge_ids(into: &mut BTreeMap<u64, Value>, from: Option<&Value>) {
    if let Some(Value::Object(m)) = from {
        for (k, v) in m {
            if let Ok(id) = k.parse::<u64>() {
                into.insert(id, v.clone());
            }
        }
    }
}

pub(super) fn id_object(m: BTreeMap<u64, Value>) -> Value {
    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// `data.jobs` of master run-manual / send-signal, checked in jobd's order.
pub(super) fn job_list(data: &Value, with_signal: bool) -> Result<Vec<(u64, String, i64)>, String> {
    let Some(Value::Array(items)) = data.get("jobs") else {
        return Err("jobs must be array".into());
    };
    let mut out = Vec::new();
    for item in items {
        if !item.is_object() {
            return Err("data is not an object".into());
        }
        let id = validate::integer(item, "id")?;
        let signal = if with_signal {
            validate::integer(item, "signal")?
        } else {
            0
        };
        let target = validate::string(item, "target")?;
        let id = u64::try_from(id).map_err(|_| "'id' must be integer".to_string())?;
        out.push((id, target, signal));
    }
    Ok(out)
}
