//! The clawctx config file.
//!
//! clawctx reads the same JSON5 shape as OpenClaw (`plugins.slots.contextEngine`,
//! `plugins.entries.<id>.enabled/.config`, `plugins.enabled`, `plugins.allow/deny`, `models`,
//! `agents`), so `--config` accepts an existing `openclaw.json` as is. The file lives at
//! `$CLAWCTX_STATE_DIR/clawctx.json` (state dir default `~/.clawctx`).
//!
//! Reading reports a malformed file with its path, line and column and a hint, and never
//! panics. Writing an existing file edits its text in place (`edit.rs`): only the changed
//! values move, and comments, key order, quoting and layout stay byte for byte; a file that
//! cannot be edited so is refused, with what to change by hand, rather than rewritten. A new
//! file is written as plain indented JSON (valid JSON5). Every write goes through a temporary
//! file renamed into place, so a crash never leaves a half-written config.

mod edit;
mod paths;
mod problems;

pub use paths::{default_config_path, state_dir, STATE_DIR_ENV};
pub use problems::{check, ConfigProblem, Severity};

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Errors at the config boundary. Each says which file (and where) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not valid JSON5.
    #[error("{path}:{line}:{column}: {message}\n  hint: {hint}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// The parser's words.
        message: String,
        /// What usually causes it.
        hint: String,
    },
    /// The file parsed but its top level is not an object.
    #[error("{path}: the config must be a JSON object at the top level, found {found}")]
    NotAnObject {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        found: String,
    },
    /// A key path cannot be set or read (e.g. a scalar stands where an object is needed).
    #[error("{path}: cannot {action} `{key}`: `{blocking}` is {found}, not an object")]
    KeyPath {
        /// The file.
        path: PathBuf,
        /// get/set/unset.
        action: &'static str,
        /// The full key.
        key: String,
        /// The prefix that is not an object.
        blocking: String,
        /// Its JSON type.
        found: String,
    },
    /// A key path is empty or has an empty segment.
    #[error("invalid key `{0}`: use dotted keys such as plugins.slots.contextEngine")]
    InvalidKey(String),
    /// The file's text cannot be edited in place keeping what the user wrote; nothing was
    /// written.
    #[error("{path}: cannot edit the file in place keeping its comments and layout: {reason}; nothing was written\n  hint: edit it by hand: {by_hand}")]
    NotPreserved {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
        /// The change to make by hand.
        by_hand: String,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A loaded config file.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    path: PathBuf,
    exists: bool,
    value: Value,
    /// The file's text as read (`None` for a missing file or an in-memory config).
    text: Option<String>,
    /// Changes since it was read, replayed on `text` by `save`.
    edits: Vec<edit::Edit>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn hint_for(message: &str) -> String {
    let m = message.to_ascii_lowercase();
    if m.contains("eof") || m.contains("end of input") {
        "the file ends early: look for an unclosed `{`, `[` or string".into()
    } else if m.contains("expected") {
        "look at this line and the one before it: a comma between two entries or a closing bracket may be missing".into()
    } else {
        "JSON5 allows comments, trailing commas and unquoted keys, but strings need quotes and entries need commas".into()
    }
}

/// Splits `a.b.c` into segments; rejects empty segments.
pub fn split_key(key: &str) -> Result<Vec<&str>, ConfigError> {
    let parts: Vec<&str> = key.split('.').collect();
    if key.trim().is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::InvalidKey(key.to_owned()));
    }
    Ok(parts)
}

impl ConfigFile {
    /// Loads `path`. A missing file is an empty config (nothing is created until a write).
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        let path = path.into();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    path,
                    exists: false,
                    value: Value::Object(Map::new()),
                    text: None,
                    edits: Vec::new(),
                })
            }
            Err(source) => return Err(ConfigError::Io { path, source }),
        };
        let value = Self::parse(&path, &text)?;
        Ok(Self {
            path,
            exists: true,
            value,
            text: Some(text),
            edits: Vec::new(),
        })
    }

    /// Parses JSON5 text (as if read from `path`, for error messages).
    pub fn parse(path: &Path, text: &str) -> Result<Value, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        let value: Value = json5::from_str(text).map_err(|e| {
            let (message, line, column) = match &e {
                json5::Error::Message { msg, location } => (
                    msg.clone(),
                    location.as_ref().map(|l| l.line).unwrap_or(0),
                    location.as_ref().map(|l| l.column).unwrap_or(0),
                ),
            };
            // The parser's message is a multi-line caret diagram; keep its last statement.
            let message = message
                .rsplit("= ")
                .next()
                .map(|m| m.trim().to_owned())
                .filter(|m| !m.is_empty())
                .unwrap_or(message);
            ConfigError::Syntax {
                path: path.to_owned(),
                line,
                column,
                hint: hint_for(&message),
                message,
            }
        })?;
        if !value.is_object() {
            return Err(ConfigError::NotAnObject {
                path: path.to_owned(),
                found: type_name(&value).into(),
            });
        }
        Ok(value)
    }

    /// An in-memory config (tests, defaults).
    pub fn from_value(path: impl Into<PathBuf>, value: Value) -> Self {
        Self {
            path: path.into(),
            exists: false,
            value,
            text: None,
            edits: Vec::new(),
        }
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file existed when loaded.
    pub fn exists(&self) -> bool {
        self.exists
    }

    /// The whole config.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The value at a dotted key, if present.
    pub fn get(&self, key: &str) -> Result<Option<&Value>, ConfigError> {
        let mut cur = &self.value;
        for part in split_key(key)? {
            match cur.get(part) {
                Some(v) => cur = v,
                None => return Ok(None),
            }
        }
        Ok(Some(cur))
    }

    /// Sets a dotted key, creating intermediate objects. Every other key is kept.
    pub fn set(&mut self, key: &str, value: Value) -> Result<(), ConfigError> {
        let parts = split_key(key)?;
        let path = self.path.clone();
        let mut cur = &mut self.value;
        for (i, part) in parts.iter().enumerate() {
            let Value::Object(map) = cur else {
                return Err(ConfigError::KeyPath {
                    path,
                    action: "set",
                    key: key.to_owned(),
                    blocking: parts[..i].join("."),
                    found: type_name(cur).into(),
                });
            };
            if i + 1 == parts.len() {
                self.edits.push(edit::Edit::Set(
                    parts.iter().map(|p| (*p).to_owned()).collect(),
                    value.clone(),
                ));
                map.insert((*part).to_owned(), value);
                return Ok(());
            }
            cur = map
                .entry((*part).to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        Ok(())
    }

    /// Replaces the whole config with `value` (a copy of [`ConfigFile::value`] changed by
    /// code that edits a `Value`, as the plugin installer does). `save` then edits the file in
    /// place as if each difference had been `set` or `unset`: keys that went are removed, keys
    /// that came or changed are written, objects present on both sides are compared key by key.
    pub fn replace_value(&mut self, value: Value) {
        let mut edits = Vec::new();
        diff(&self.value, &value, &mut Vec::new(), &mut edits);
        self.edits.extend(edits);
        self.value = value;
    }

    /// Removes a dotted key; returns the removed value. Parents emptied by the removal are
    /// removed too when `prune_empty` is set (as `doctor --fix` does for `plugins.slots`).
    pub fn unset(&mut self, key: &str, prune_empty: bool) -> Result<Option<Value>, ConfigError> {
        let parts = split_key(key)?;
        let removed = remove_at(&mut self.value, &parts, prune_empty);
        if removed.is_some() {
            self.edits.push(edit::Edit::Unset(
                parts.iter().map(|p| (*p).to_owned()).collect(),
                prune_empty,
            ));
        }
        Ok(removed)
    }

    /// The text `save` would write: the file's own text with the edits applied in place
    /// (checked by reading it back), or indented JSON for a file that had no content.
    fn text_to_write(&self) -> Result<String, ConfigError> {
        let original = self.text.as_deref().filter(|t| !t.trim().is_empty());
        let Some(original) = original else {
            let mut text =
                serde_json::to_string_pretty(&self.value).map_err(|e| ConfigError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::other(e),
                })?;
            text.push('\n');
            return Ok(text);
        };
        let refuse = |reason: String| ConfigError::NotPreserved {
            path: self.path.clone(),
            reason,
            by_hand: self
                .edits
                .iter()
                .map(edit::Edit::by_hand)
                .collect::<Vec<_>>()
                .join(", then "),
        };
        let edited = edit::apply(original, &self.edits).map_err(refuse)?;
        match json5::from_str::<Value>(&edited) {
            Ok(v) if v == self.value => Ok(edited),
            Ok(_) => Err(refuse(
                "the edited text would not read back as the intended config".into(),
            )),
            Err(e) => Err(refuse(format!("the edited text would not parse ({e})"))),
        }
    }

    /// Writes the config atomically (temp file in the same directory, then rename). An
    /// existing file keeps its text outside the changed values (see the module header).
    pub fn save(&mut self) -> Result<(), ConfigError> {
        let text = self.text_to_write()?;
        let io = |source| ConfigError::Io {
            path: self.path.clone(),
            source,
        };
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&self.path).map_err(|e| io(e.error))?;
        self.exists = true;
        self.text = Some(text);
        self.edits.clear();
        Ok(())
    }
}

/// The edits that turn `old` into `new` (objects compared key by key).
fn diff(old: &Value, new: &Value, at: &mut Vec<String>, out: &mut Vec<edit::Edit>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().filter(|k| !b.contains_key(*k)) {
                let mut path = at.clone();
                path.push(key.clone());
                out.push(edit::Edit::Unset(path, false));
            }
            for (key, nv) in b {
                at.push(key.clone());
                match a.get(key) {
                    Some(ov) => diff(ov, nv, at, out),
                    None => out.push(edit::Edit::Set(at.clone(), nv.clone())),
                }
                at.pop();
            }
        }
        _ if old == new => {}
        _ => out.push(edit::Edit::Set(at.clone(), new.clone())),
    }
}

fn remove_at(value: &mut Value, parts: &[&str], prune: bool) -> Option<Value> {
    let Value::Object(map) = value else {
        return None;
    };
    if parts.len() == 1 {
        return map.remove(parts[0]);
    }
    let child = map.get_mut(parts[0])?;
    let removed = remove_at(child, &parts[1..], prune);
    if prune && removed.is_some() && child.as_object().is_some_and(|m| m.is_empty()) {
        map.remove(parts[0]);
    }
    removed
}

/// Parses a value given on the command line: JSON5 when it parses (`true`, `42`, `{a: 1}`,
/// `"quoted"`), otherwise the raw text as a string.
pub fn parse_cli_value(text: &str) -> Value {
    json5::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}
