//! In-place edits of a JSON5 config file that keep everything the user wrote.
//!
//! `--config` points at the user's own `openclaw.json`, shared with OpenClaw: comments, key
//! order, quoting and layout are theirs. `config set`/`unset` (and `doctor --fix`) therefore
//! edit the file's text, not a re-serialized value: `jsonc-parser`'s concrete syntax tree (every
//! comment and space kept, JSON5's unquoted keys, single quotes, hex numbers, trailing commas)
//! locates the property, replaces only its value, removes only it, or appends a new key to its
//! enclosing object with the object's indentation and comma style. New keys and strings are
//! written in the file's own style: unquoted keys when the file's keys mostly are, single
//! quotes when its strings mostly use them.
//!
//! The caller ([`crate::ConfigFile::save`]) re-reads the edited text with the same JSON5 parser
//! that reads the config and compares it with the value it expects; when the two differ, or the
//! tree cannot be built, nothing is written and the user is told what to change by hand. So a
//! file is either edited exactly or left as it was.

use jsonc_parser::cst::{CstInputValue, CstLeafNode, CstNode, CstObject, CstRootNode};
use jsonc_parser::ParseOptions;
use serde_json::Value;

/// One change to apply to the file's text, in the order it was made in memory.
#[derive(Clone, Debug)]
pub(crate) enum Edit {
    /// Set the dotted key (segments) to the value, creating missing objects.
    Set(Vec<String>, Value),
    /// Remove the dotted key; with `true`, parents emptied by the removal go too.
    Unset(Vec<String>, bool),
}

impl Edit {
    /// What to do by hand, for the refusal message.
    pub(crate) fn by_hand(&self) -> String {
        match self {
            Edit::Set(key, value) => format!("set `{}` to {value}", key.join(".")),
            Edit::Unset(key, _) => format!("remove `{}`", key.join(".")),
        }
    }
}

/// How the file writes keys and strings.
#[derive(Clone, Copy, Debug)]
struct Style {
    /// Keys without quotes (`plugins: …`).
    bare_keys: bool,
    /// Strings in single quotes.
    single_quotes: bool,
}

fn options() -> ParseOptions {
    ParseOptions {
        // JSON5 requires commas; accepting a file without them would edit what json5 refuses.
        allow_missing_commas: false,
        ..ParseOptions::default()
    }
}

/// Applies `edits` to `text`. `Err` says why the text cannot be edited in place.
pub(crate) fn apply(text: &str, edits: &[Edit]) -> Result<String, String> {
    let root = CstRootNode::parse(text, &options())
        .map_err(|e| format!("its syntax is beyond the in-place editor ({e})"))?;
    let top = root
        .object_value()
        .ok_or_else(|| "its top level is not an object".to_owned())?;
    let style = style_of(&root);
    for edit in edits {
        match edit {
            Edit::Set(key, value) => set(&top, key, value, style)?,
            Edit::Unset(key, prune) => unset(&top, key, *prune),
        }
    }
    Ok(root.to_string())
}

fn style_of(root: &CstRootNode) -> Style {
    let (mut bare, mut quoted, mut single, mut double) = (0usize, 0usize, 0usize, 0usize);
    let mut stack: Vec<CstNode> = root.children();
    while let Some(node) = stack.pop() {
        if let Some(prop) = node.as_object_prop() {
            match prop.name() {
                Some(jsonc_parser::cst::ObjectPropName::Word(_)) => bare += 1,
                Some(jsonc_parser::cst::ObjectPropName::String(_)) => quoted += 1,
                None => {}
            }
        }
        if let Some(lit) = node.as_string_lit() {
            if lit.raw_value().starts_with('\'') {
                single += 1;
            } else {
                double += 1;
            }
        }
        stack.extend(node.children());
    }
    Style {
        bare_keys: bare > quoted,
        single_quotes: single > double,
    }
}

fn input(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(input).collect()),
        Value::Object(map) => {
            CstInputValue::Object(map.iter().map(|(k, v)| (k.clone(), input(v))).collect())
        }
    }
}

/// An ECMAScript identifier name in ASCII: what JSON5 reads as an unquoted key.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// `s` as a single-quoted JSON5 string.
fn single_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Rewrites the keys and strings of a node this module inserted in the file's style.
fn restyle(node: CstNode, style: Style) {
    let mut stack = vec![node];
    while let Some(node) = stack.pop() {
        if let Some(prop) = node.as_object_prop() {
            if let Some(jsonc_parser::cst::ObjectPropName::String(lit)) = prop.name() {
                if let Ok(name) = lit.decoded_value() {
                    if style.bare_keys && is_identifier(&name) {
                        lit.set_raw_value(name);
                    } else if style.single_quotes {
                        lit.set_raw_value(single_quoted(&name));
                    }
                }
            }
            if let Some(value) = prop.value() {
                stack.push(value);
            }
            continue;
        }
        if let CstNode::Leaf(CstLeafNode::StringLit(lit)) = &node {
            if style.single_quotes {
                if let Ok(s) = lit.decoded_value() {
                    lit.set_raw_value(single_quoted(&s));
                }
            }
            continue;
        }
        stack.extend(node.children());
    }
}

fn set(top: &CstObject, key: &[String], value: &Value, style: Style) -> Result<(), String> {
    let Some((last, parents)) = key.split_last() else {
        return Err("the key is empty".into());
    };
    let mut obj = top.clone();
    for (i, seg) in parents.iter().enumerate() {
        obj = match obj.get(seg) {
            Some(prop) => prop
                .object_value()
                .ok_or_else(|| format!("`{}` is not an object in the file", key[..=i].join(".")))?,
            None => {
                let prop = obj.append(seg, CstInputValue::Object(Vec::new()));
                restyle(prop.clone().into(), style);
                prop.object_value()
                    .ok_or_else(|| format!("`{}` could not be created", key[..=i].join(".")))?
            }
        };
    }
    match obj.get(last) {
        Some(prop) => {
            prop.set_value(input(value));
            if let Some(v) = prop.value() {
                restyle(v, style);
            }
        }
        None => {
            let prop = obj.append(last, input(value));
            restyle(prop.into(), style);
        }
    }
    Ok(())
}

fn unset(top: &CstObject, key: &[String], prune: bool) {
    let Some((last, parents)) = key.split_last() else {
        return;
    };
    // The chain of (object, property holding the next object) down to the key's object.
    let mut objects = vec![top.clone()];
    let mut props = Vec::new();
    for seg in parents {
        let Some(prop) = objects.last().and_then(|o| o.get(seg)) else {
            return;
        };
        let Some(child) = prop.object_value() else {
            return;
        };
        props.push(prop);
        objects.push(child);
    }
    let Some(target) = objects.last().and_then(|o| o.get(last)) else {
        return;
    };
    target.remove();
    if !prune {
        return;
    }
    for (object, prop) in objects.iter().skip(1).zip(props).rev() {
        if !object.properties().is_empty() {
            break;
        }
        prop.remove();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn keys(k: &str) -> Vec<String> {
        k.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn a_new_key_takes_the_files_style() {
        let text = "{\n  // mine\n  plugins: { slots: { contextEngine: 'lossless', }, },\n}\n";
        let out = apply(
            text,
            &[Edit::Set(
                keys("plugins.entries.lossless.config.freshTailCount"),
                Value::from(32),
            )],
        )
        .unwrap();
        assert!(out.starts_with("{\n  // mine\n  plugins: {"), "{out}");
        assert!(out.contains("entries: {"), "{out}");
        assert!(!out.contains("\"entries\""), "{out}");
        let v: Value = json5::from_str(&out).unwrap();
        assert_eq!(
            v["plugins"]["entries"]["lossless"]["config"]["freshTailCount"],
            32
        );
        assert_eq!(v["plugins"]["slots"]["contextEngine"], "lossless");
    }

    #[test]
    fn single_quotes_are_kept_for_a_replaced_string() {
        let text = "{ a: 'x', b: 'y' }";
        let out = apply(text, &[Edit::Set(keys("a"), Value::from("it's"))]).unwrap();
        assert_eq!(out, "{ a: 'it\\'s', b: 'y' }");
    }

    #[test]
    fn unset_prunes_emptied_parents_only_when_asked() {
        let text =
            "{\n  plugins: {\n    slots: { contextEngine: \"x\" },\n    enabled: true,\n  },\n}\n";
        let kept = apply(
            text,
            &[Edit::Unset(keys("plugins.slots.contextEngine"), false)],
        )
        .unwrap();
        let v: Value = json5::from_str(&kept).unwrap();
        assert_eq!(v["plugins"]["slots"], serde_json::json!({}));
        let pruned = apply(
            text,
            &[Edit::Unset(keys("plugins.slots.contextEngine"), true)],
        )
        .unwrap();
        let v: Value = json5::from_str(&pruned).unwrap();
        assert_eq!(v, serde_json::json!({"plugins": {"enabled": true}}));
    }
}
