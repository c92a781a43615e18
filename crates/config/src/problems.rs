//! Config checks `doctor` reports: keys of the wrong type and values that cannot work.
//! Each problem names its key.

use serde::Serialize;
use serde_json::Value;

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Works, but probably not as intended.
    Warning,
    /// Ignored or fails.
    Error,
}

/// One problem with a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigProblem {
    /// Dotted key.
    pub key: String,
    /// Severity.
    pub severity: Severity,
    /// What is wrong and what to do.
    pub message: String,
}

fn problem(key: &str, severity: Severity, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        key: key.to_owned(),
        severity,
        message: message.into(),
    }
}

fn expect(
    out: &mut Vec<ConfigProblem>,
    v: Option<&Value>,
    key: &str,
    kind: &str,
    ok: fn(&Value) -> bool,
) {
    if let Some(v) = v {
        if !ok(v) {
            out.push(problem(
                key,
                Severity::Error,
                format!("must be {kind}; found {v}; it is ignored"),
            ));
        }
    }
}

/// Checks the shape of the keys clawctx reads.
pub fn check(config: &Value) -> Vec<ConfigProblem> {
    let mut out = Vec::new();
    let plugins = config.get("plugins");
    expect(&mut out, plugins, "plugins", "an object", Value::is_object);
    let Some(plugins) = plugins.filter(|p| p.is_object()) else {
        return out;
    };
    expect(
        &mut out,
        plugins.get("enabled"),
        "plugins.enabled",
        "a boolean",
        Value::is_boolean,
    );
    expect(
        &mut out,
        plugins.get("slots"),
        "plugins.slots",
        "an object",
        Value::is_object,
    );
    expect(
        &mut out,
        plugins.get("entries"),
        "plugins.entries",
        "an object",
        Value::is_object,
    );
    for list in ["allow", "deny"] {
        let key = format!("plugins.{list}");
        match plugins.get(list) {
            Some(Value::Array(items)) => {
                if items.iter().any(|i| !i.is_string()) {
                    out.push(problem(
                        &key,
                        Severity::Error,
                        "must list plugin ids as strings",
                    ));
                }
            }
            Some(other) => out.push(problem(
                &key,
                Severity::Error,
                format!("must be an array of plugin ids; found {other}"),
            )),
            None => {}
        }
    }
    if let Some(slot) = plugins.get("slots").and_then(|s| s.get("contextEngine")) {
        match slot {
            Value::String(s) if s.trim().is_empty() => out.push(problem(
                "plugins.slots.contextEngine",
                Severity::Warning,
                "is blank; the default engine \"legacy\" is used",
            )),
            Value::String(_) => {}
            other => out.push(problem(
                "plugins.slots.contextEngine",
                Severity::Error,
                format!("must be a string engine id; found {other}; the default engine \"legacy\" is used"),
            )),
        }
    }
    if let Some(Value::Object(entries)) = plugins.get("entries") {
        for (id, entry) in entries {
            let key = format!("plugins.entries.{id}");
            if !entry.is_object() {
                out.push(problem(
                    &key,
                    Severity::Error,
                    format!("must be an object; found {entry}"),
                ));
                continue;
            }
            expect(
                &mut out,
                entry.get("enabled"),
                &format!("{key}.enabled"),
                "a boolean",
                Value::is_boolean,
            );
            expect(
                &mut out,
                entry.get("config"),
                &format!("{key}.config"),
                "an object",
                Value::is_object,
            );
        }
    }
    out
}
