//! A jobctl command and its arguments turned into the request it sends, with jobctl's
//! argument errors.

use serde_json::{json, Value};

pub(super) fn build_request(
    master: bool,
    command: &str,
    args: &[String],
) -> Result<(&'static str, Value), String> {
    let targets = |min: usize| -> Result<Value, String> {
        if args.len() < min {
            return Err("No targets specified.".into());
        }
        Ok(if args.is_empty() {
            json!({})
        } else {
            json!({"targets": args})
        })
    };
    let number = |s: &String| -> Result<i64, String> {
        s.parse::<i64>()
            .map_err(|_| "'concurrency' must be a number.".to_string())
    };
    let r = match (master, command) {
        (false, "list-targets") | (_, "memory-usage") => ("status", json!({})),
        (true, "list-workers") => ("status", json!({"poll_workers": true})),
        (false, "poll") => ("poll", targets(1)?),
        (true, "poke") => ("poke", targets(1)?),
        (false, "pause") => ("pause", targets(1)?),
        (false, "continue") => ("continue", targets(1)?),
        (true, "pause") => ("pause", targets(0)?),
        (true, "continue") => ("continue", targets(0)?),
        (false, "set-target-concurrency") | (false, "add-target") => {
            if args.len() != 2 {
                return Err("Invalid number of arguments.".into());
            }
            let kind = if command == "add-target" {
                "add-target"
            } else {
                "set-target-concurrency"
            };
            (
                kind,
                json!({"target": args[0], "concurrency": number(&args[1])?}),
            )
        }
        (false, "remove-target") => {
            if args.len() != 1 {
                return Err("Invalid number of arguments.".into());
            }
            ("remove-target", json!({"target": args[0]}))
        }
        (false, "run-manual") => {
            let ids: Result<Vec<u64>, _> = args.iter().map(|a| a.parse::<u64>()).collect();
            match ids {
                Ok(ids) if !ids.is_empty() => ("run-manual", json!({"ids": ids})),
                _ => return Err("Invalid job ids.".into()),
            }
        }
        (true, "run-manual") => {
            let mut jobs = Vec::new();
            for a in args {
                let (id, target) = a.split_once(':').ok_or("Expected ID:TARGET.")?;
                let id: u64 = id.parse().map_err(|_| "Invalid job ids.")?;
                jobs.push(json!({"id": id, "target": target}));
            }
            if jobs.is_empty() {
                return Err("Invalid job ids.".into());
            }
            ("run-manual", json!({"jobs": jobs}))
        }
        (false, "send-signal") if args.len() == 2 => {
            let sig: Value = match args[1].parse::<i64>() {
                Ok(n) => n.into(),
                Err(_) => args[1].clone().into(),
            };
            ("send-signal", json!({"jobs": {args[0].clone(): sig}}))
        }
        (true, "send-signal") if args.len() == 3 => {
            let id: u64 = args[0].parse().map_err(|_| "Invalid job ids.")?;
            let sig: i64 = args[1].parse().map_err(|_| "'signal' must be a number.")?;
            (
                "send-signal",
                json!({"jobs": [{"id": id, "signal": sig, "target": args[2]}]}),
            )
        }
        (_, "send-signal") => return Err("Invalid number of arguments.".into()),
        _ => return Err(format!("Unsupported command: '{command}'")),
    };
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_errors() {
        assert_eq!(
            build_request(false, "poll", &[]).unwrap_err(),
            "No targets specified."
        );
        assert_eq!(
            build_request(false, "nope", &[]).unwrap_err(),
            "Unsupported command: 'nope'"
        );
        assert_eq!(
            build_request(false, "set-target-concurrency", &["a".into()]).unwrap_err(),
            "Invalid number of arguments."
        );
        assert_eq!(
            build_request(false, "set-target-concurrency", &["a".into(), "x".into()]).unwrap_err(),
            "'concurrency' must be a number."
        );
        assert_eq!(build_request(true, "pause", &[]).unwrap().1, json!({}));
    }
}
