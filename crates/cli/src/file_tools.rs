//! The file tools `chat` and `run` give the model: `read` and `ls`, read-only and confined to
//! the directory the command was started in.
//!
//! `clawctx run "summarize README.md"` is how the README shows the CLI, and a model can only do
//! that if it can open the file. OpenClaw's agent has a `read` tool for this (the path, then an
//! optional 1-based `offset` and a line `limit`); these are its read-only part, with the same
//! names and arguments, so a prompt written for OpenClaw works here. Nothing writes, nothing
//! runs. A path is resolved against the working directory and, with every symbolic link
//! followed, must stay inside it: `../x`, an absolute path elsewhere, or a link out of the
//! directory is refused with the reason, as a tool error the model sees. Output is capped
//! ([`MAX_LINES`] lines, [`MAX_BYTES`] bytes), with the offset to continue from.
//! The gateway offers no file tools: its callers are not on this machine's shell.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::{AgentTool, ToolCallContext};
use serde_json::{json, Value};

/// Lines `read` returns at most per call.
pub const MAX_LINES: usize = 2000;
/// Bytes `read` returns at most per call.
pub const MAX_BYTES: usize = 50 * 1024;
/// Entries `ls` lists at most.
const MAX_ENTRIES: usize = 500;

/// `read` and `ls` over `root` (the working directory), or none when `root` cannot be
/// resolved (the tools would refuse every path anyway).
pub fn file_tools(root: &Path) -> Vec<Arc<dyn AgentTool>> {
    let Ok(root) = root.canonicalize() else {
        return Vec::new();
    };
    vec![
        Arc::new(ReadTool { root: root.clone() }),
        Arc::new(LsTool { root }),
    ]
}

/// `path` resolved inside `root`, symbolic links followed; an error says why not.
fn confined(root: &Path, path: &str) -> Result<PathBuf, String> {
    if path.trim().is_empty() {
        return Err("\"path\" is empty".into());
    }
    let joined = root.join(path);
    let resolved = joined.canonicalize().map_err(|e| format!("{path}: {e}"))?;
    if !resolved.starts_with(root) {
        return Err(format!(
            "{path} is outside the working directory {}; only files under it can be read",
            root.display()
        ));
    }
    Ok(resolved)
}

fn string_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing \"{key}\" (a string)"))
}

fn count_arg(args: &Value, key: &str) -> Result<Option<usize>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("\"{key}\" must be a whole number of at least 1, got {v}")),
    }
}

/// `read`: a text file's lines.
struct ReadTool {
    root: PathBuf,
}

#[async_trait]
impl AgentTool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Read a text file under the working directory. Returns at most 2000 lines or 50 KB; \
         for a longer file, call again with offset (the 1-based line to start at) and limit \
         (lines). Paths are relative to the working directory; nothing outside it can be read."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path of the file, relative to the working directory."},
                "offset": {"type": "integer", "minimum": 1, "description": "Line number to start reading from (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to read."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value, _cx: ToolCallContext) -> Result<String, String> {
        let path = string_arg(&args, "path")?;
        let offset = count_arg(&args, "offset")?.unwrap_or(1);
        let limit = count_arg(&args, "limit")?
            .unwrap_or(MAX_LINES)
            .min(MAX_LINES);
        let file = confined(&self.root, path)?;
        if !file.is_file() {
            return Err(format!("{path} is not a file (use ls for a directory)"));
        }
        let bytes = tokio::fs::read(&file)
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return Err(format!("{path} is a binary file"));
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return Ok(String::new());
        }
        if offset > lines.len() {
            return Err(format!(
                "offset {offset} is past the end of {path} ({} lines)",
                lines.len()
            ));
        }
        let mut out = String::new();
        let mut next = None;
        for (i, line) in lines.iter().enumerate().skip(offset - 1) {
            if i + 1 - offset == limit || out.len() + line.len() + 1 > MAX_BYTES {
                next = Some(i + 1);
                break;
            }
            out.push_str(line);
            out.push('\n');
        }
        match next {
            Some(n) if out.is_empty() => Err(format!(
                "line {n} of {path} alone is over {MAX_BYTES} bytes"
            )),
            Some(n) => {
                let _ = write!(
                    out,
                    "\n[{} more lines; call read with offset={n} to continue]",
                    lines.len() + 1 - n
                );
                Ok(out)
            }
            None => Ok(out),
        }
    }
}

/// `ls`: a directory's entries.
struct LsTool {
    root: PathBuf,
}

#[async_trait]
impl AgentTool for LsTool {
    fn name(&self) -> &str {
        "ls"
    }

    fn description(&self) -> &str {
        "List a directory under the working directory (default: the working directory itself), \
         sorted, directories ending in /."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory, relative to the working directory (default \".\")."}
            },
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value, _cx: ToolCallContext) -> Result<String, String> {
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let dir = confined(&self.root, path)?;
        if !dir.is_dir() {
            return Err(format!("{path} is not a directory"));
        }
        let mut names = Vec::new();
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| format!("{path}: {e}"))?
        {
            let mut name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
                name.push('/');
            }
            names.push(name);
        }
        names.sort();
        let more = names.len().saturating_sub(MAX_ENTRIES);
        names.truncate(MAX_ENTRIES);
        let mut out = names.join("\n");
        if more > 0 {
            let _ = write!(out, "\n[{more} more entries]");
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tool(tools: &[Arc<dyn AgentTool>], name: &str) -> Arc<dyn AgentTool> {
        tools.iter().find(|t| t.name() == name).unwrap().clone()
    }

    #[tokio::test]
    async fn read_pages_long_files_and_stays_inside_the_directory() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("work");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(outer.path().join("secret.txt"), "outside").unwrap();
        let long: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
        std::fs::write(root.join("long.txt"), &long).unwrap();
        std::os::unix::fs::symlink(outer.path().join("secret.txt"), root.join("link")).unwrap();
        let tools = file_tools(&root);
        let read = tool(&tools, "read");
        let cx = ToolCallContext::default();
        let first = read
            .execute(json!({"path": "long.txt"}), cx.clone())
            .await
            .unwrap();
        assert!(first.starts_with("line 1\n") && first.contains("line 2000\n"));
        assert!(!first.contains("line 2001\n"));
        assert!(first.contains("call read with offset=2001"), "{first}");
        let rest = read
            .execute(json!({"path": "long.txt", "offset": 2001}), cx.clone())
            .await
            .unwrap();
        assert!(rest.starts_with("line 2001\n") && rest.ends_with("line 2500\n"));
        let some = read
            .execute(
                json!({"path": "./long.txt", "offset": 3, "limit": 2}),
                cx.clone(),
            )
            .await
            .unwrap();
        assert!(some.starts_with("line 3\nline 4\n"), "{some}");
        let absolute = outer.path().join("secret.txt").display().to_string();
        for (path, why) in [
            ("../secret.txt", "outside the working directory"),
            (absolute.as_str(), "outside"),
            ("link", "outside"),
            ("/etc/passwd", "outside"),
            ("missing.txt", "No such file"),
            (".", "not a file"),
        ] {
            let err = read
                .execute(json!({"path": path}), cx.clone())
                .await
                .unwrap_err();
            assert!(err.contains(why), "{path}: {err}");
        }
        let err = read
            .execute(json!({"path": "long.txt", "offset": 0}), cx.clone())
            .await
            .unwrap_err();
        assert!(err.contains("\"offset\""), "{err}");
        let listed = tool(&tools, "ls")
            .execute(json!({}), cx.clone())
            .await
            .unwrap();
        assert_eq!(listed, "link\nlong.txt");
        let err = tool(&tools, "ls")
            .execute(json!({"path": ".."}), cx)
            .await
            .unwrap_err();
        assert!(err.contains("outside"), "{err}");
    }
}
