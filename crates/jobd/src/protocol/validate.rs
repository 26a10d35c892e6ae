//! Request argument checks with jobd's exact error strings and check order.

use serde_json::Value;

use super::js_typeof;

/// `data.targets`: `None` when absent ("all targets"), else a non-empty list of strings.
pub fn targets(data: &Value) -> Result<Option<Vec<String>>, String> {
    let Some(v) = data.get("targets") else {
        return Ok(None);
    };
    let Value::Array(items) = v else {
        return Err("targets must be array".into());
    };
    if items.is_empty() {
        return Err("targets are empty".into());
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(s) => out.push(s.clone()),
            other => {
                return Err(format!(
                    "all targets must be strings, {} given",
                    js_typeof(other)
                ))
            }
        }
    }
    Ok(Some(out))
}

/// A required string field.
pub fn string(data: &Value, field: &str) -> Result<String, String> {
    match data.get(field) {
        None | Some(Value::Null) => Err(format!("missing required field {field}")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("'{field}' must be string")),
    }
}

/// A required integer field (JS `Number.isInteger`).
pub fn integer(data: &Value, field: &str) -> Result<i64, String> {
    match data.get(field) {
        None | Some(Value::Null) => Err(format!("missing required field {field}")),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| format!("'{field}' must be integer")),
        Some(_) => Err(format!("'{field}' must be integer")),
    }
}

/// add-target's and set-target-concurrency's `target` and `concurrency`.
pub fn target_and_concurrency(data: &Value) -> Result<(String, u32), String> {
    let target = string(data, "target")?;
    let c = integer(data, "concurrency")?;
    if c <= 0 || c > u32::MAX as i64 {
        return Err("Invalid concurrency value.".into());
    }
    Ok((target, c as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn target_errors_in_jobd_order() {
        assert_eq!(targets(&json!({})), Ok(None));
        assert_eq!(
            targets(&json!({"targets": null})).unwrap_err(),
            "targets must be array"
        );
        assert_eq!(
            targets(&json!({"targets": []})).unwrap_err(),
            "targets are empty"
        );
        assert_eq!(
            targets(&json!({"targets": ["a", 1]})).unwrap_err(),
            "all targets must be strings, number given"
        );
    }

    #[test]
    fn field_errors() {
        assert_eq!(
            target_and_concurrency(&json!({})).unwrap_err(),
            "missing required field target"
        );
        assert_eq!(
            target_and_concurrency(&json!({"target": 1})).unwrap_err(),
            "'target' must be string"
        );
        assert_eq!(
            target_and_concurrency(&json!({"target": "a"})).unwrap_err(),
            "missing required field concurrency"
        );
        assert_eq!(
            target_and_concurrency(&json!({"target": "a", "concurrency": "x"})).unwrap_err(),
            "'concurrency' must be integer"
        );
        assert_eq!(
            target_and_concurrency(&json!({"target": "a", "concurrency": 0})).unwrap_err(),
            "Invalid concurrency value."
        );
    }
}
