//! Reading one key of a jobd ini file, with jobd's error messages.

use super::ini::Ini;

/// Formats a config error the way jobd prints it.
pub(super) fn err(msg: String) -> String {
    format!("config parsing error: {msg}")
}

pub(super) fn required<'a>(ini: &'a Ini, key: &str) -> Result<&'a str, String> {
    match ini.get(key) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(err(format!("'{key}' is not defined"))),
    }
}

pub(super) fn int(ini: &Ini, key: &str, default: Option<i64>) -> Result<i64, String> {
    match ini.get(key) {
        None | Some("") => default.ok_or_else(|| err(format!("'{key}' is not defined"))),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .map_err(|_| err(format!("'{key}' must be an integer"))),
    }
}

pub(super) fn port(ini: &Ini, key: &str, default: Option<i64>) -> Result<u16, String> {
    let v = int(ini, key, default)?;
    u16::try_from(v).map_err(|_| err(format!("'{key}' must be a port number (0-65535)")))
}

pub(super) fn boolean(ini: &Ini, key: &str) -> bool {
    matches!(ini.get(key), Some("1") | Some("true"))
}

pub(super) fn optional(ini: &Ini, key: &str) -> Option<String> {
    ini.get(key).filter(|v| !v.is_empty()).map(str::to_string)
}

pub(super) fn level(ini: &Ini, key: &str) -> Result<String, String> {
    let v = ini.get(key).unwrap_or("warn");
    match v {
        "trace" | "debug" | "info" | "warn" | "error" => Ok(v.to_string()),
        _ => Err(err(format!(
            "'{key}' must be one of trace, debug, info, warn, error"
        ))),
    }
}

pub(super) fn nonneg(ini: &Ini, key: &str, default: i64) -> Result<u64, String> {
    u64::try_from(int(ini, key, Some(default))?)
        .map_err(|_| err(format!("'{key}' must not be negative")))
}

pub(super) fn port_opt(ini: &Ini, key: &str) -> Result<Option<u16>, String> {
    match ini.get(key) {
        None | Some("") => Ok(None),
        Some(_) => port(ini, key, None).map(Some),
    }
}
