//! Plugin manifests: `clawctx.plugin.json` or OpenClaw's `openclaw.plugin.json`, read as is
//! and without running any plugin code (contract §11).
//!
//! The manifest says who the plugin is (`id`, `name`, `version`, `kind`), how to start it (a
//! Node module, a Python module or a command) and what its config looks like (`configSchema`,
//! a JSON Schema that `plugins.entries.<id>.config` must satisfy). Errors name the file and
//! the key so an operator can fix them without reading code; config errors name the failing
//! config path. The entry must stay inside the plugin root.
//!
//! A plugin published for OpenClaw must load here unchanged, so the rules are OpenClaw's
//! (`src/plugins/manifest.ts`, `src/plugins/discovery.ts`): the manifest is JSON5 of at most
//! 256 KiB; `id` and an object `configSchema` are required (OpenClaw refuses a manifest
//! without a schema, even an empty one, and so do we, with OpenClaw's words and the fix);
//! the entry comes from `package.json` `openclaw.extensions` (with `openclaw.runtimeExtensions`
//! and the built JavaScript OpenClaw infers for a TypeScript entry that was not shipped), else
//! `index.ts|js|mjs|cjs`. clawctx's own keys (`entry`, `main`, `command`, `runtime`) come
//! first, and `package.json` `main`, `plugin.py` and `__init__.py` last, where OpenClaw would
//! find nothing.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::error::PluginError;

/// Manifest file names, in lookup order.
pub const MANIFEST_FILES: [&str; 2] = ["clawctx.plugin.json", "openclaw.plugin.json"];

/// The largest manifest OpenClaw reads.
pub const MAX_MANIFEST_BYTES: u64 = 256 * 1024;

/// Plugin ids OpenClaw keeps for itself.
pub const RESERVED_IDS: [&str; 1] = ["node-mcp"];

/// What to add to a manifest that has no `configSchema`: the empty, strict schema (what
/// OpenClaw's `emptyPluginConfigSchema()` describes).
pub const EMPTY_CONFIG_SCHEMA: &str =
    r#""configSchema": {"type": "object", "additionalProperties": false, "properties": {}}"#;

/// How a plugin is started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginEntry {
    /// A JavaScript (or TypeScript) module, run by the embedded Node runner.
    Node(PathBuf),
    /// A Python module file or package directory, run by `python3 -m clawctx_plugin.runner`.
    Python(PathBuf),
    /// A command that serves the protocol itself (e.g. a Rust binary built with
    /// `clawctx-plugin-sdk`). A program with a `/` is resolved inside the plugin root; a bare
    /// name is looked up on `PATH`.
    Command {
        /// Program.
        program: String,
        /// Arguments.
        args: Vec<String>,
    },
}

impl PluginEntry {
    /// A short description for messages and the handshake (`plugin.entry`).
    pub fn describe(&self) -> String {
        match self {
            PluginEntry::Node(p) | PluginEntry::Python(p) => p.display().to_string(),
            PluginEntry::Command { program, args } => std::iter::once(program.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// `node`, `python` or `command`.
    pub fn runtime(&self) -> &'static str {
        match self {
            PluginEntry::Node(_) => "node",
            PluginEntry::Python(_) => "python",
            PluginEntry::Command { .. } => "command",
        }
    }
}

/// A parsed manifest.
#[derive(Clone, Debug)]
pub struct PluginManifest {
    /// The plugin id: the key of `plugins.entries.<id>`.
    pub id: String,
    /// Display name.
    pub name: Option<String>,
    /// Version.
    pub version: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// `kind`, normalized to a list (`context-engine`, `memory`, ...).
    pub kinds: Vec<String>,
    /// How to start it.
    pub entry: PluginEntry,
    /// `configSchema` (an empty schema when absent).
    pub config_schema: Value,
    /// The plugin root (canonical).
    pub root: PathBuf,
    /// The manifest file that was read.
    pub manifest_path: PathBuf,
    /// The manifest as read.
    pub raw: Value,
}

impl PluginManifest {
    /// Whether the plugin declares `kind: "context-engine"`.
    pub fn is_context_engine(&self) -> bool {
        self.kinds.iter().any(|k| k == "context-engine")
    }

    /// Validates `plugins.entries.<id>.config` in `config` (the whole config) against
    /// `configSchema`. A missing plugin config is validated as `{}`.
    pub fn validate_config(&self, config: &Value) -> Result<(), PluginError> {
        let plugin_config = plugin_config(config, &self.id);
        validate_plugin_config(&self.id, &self.config_schema, &plugin_config)
    }
}

/// `plugins.entries.<id>.config` of a whole config, `{}` when absent.
pub fn plugin_config(config: &Value, plugin_id: &str) -> Value {
    config
        .get("plugins")
        .and_then(|p| p.get("entries"))
        .and_then(|e| e.get(plugin_id))
        .and_then(|e| e.get("config"))
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()))
}

/// Validates one plugin's config object against its schema; the error names the first
/// failing path as `plugins.entries.<id>.config<path>`.
pub fn validate_plugin_config(
    plugin_id: &str,
    schema: &Value,
    plugin_config: &Value,
) -> Result<(), PluginError> {
    let base = format!("plugins.entries.{plugin_id}.config");
    let validator = jsonschema::validator_for(schema).map_err(|e| PluginError::ConfigInvalid {
        plugin_id: plugin_id.to_owned(),
        path: base.clone(),
        message: format!("the plugin's configSchema is not a valid JSON Schema: {e}"),
    })?;
    let mut errors = validator.iter_errors(plugin_config);
    if let Some(err) = errors.next() {
        let pointer = err.instance_path.as_str().to_owned();
        return Err(PluginError::ConfigInvalid {
            plugin_id: plugin_id.to_owned(),
            path: format!("{base}{}", pointer_to_path(&pointer)),
            message: err.to_string(),
        });
    }
    Ok(())
}

/// `/a/0/b` → `.a[0].b`.
fn pointer_to_path(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            out.push('.');
            out.push_str(&seg);
        }
    }
    out
}

/// Finds the manifest file in `dir`.
pub fn find_manifest(dir: &Path) -> Option<PathBuf> {
    MANIFEST_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
}

fn read_json(path: &Path) -> Result<Value, PluginError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PluginError::manifest(path, "(file)", e.to_string()))?;
    serde_json::from_str(&text)
        .map_err(|e| PluginError::manifest(path, "(file)", format!("not valid JSON: {e}")))
}

/// Reads a manifest as OpenClaw does: JSON5 (comments, trailing commas), at most
/// [`MAX_MANIFEST_BYTES`].
fn read_manifest_file(path: &Path) -> Result<Value, PluginError> {
    let size = std::fs::metadata(path)
        .map_err(|e| PluginError::manifest(path, "(file)", e.to_string()))?
        .len();
    if size > MAX_MANIFEST_BYTES {
        return Err(PluginError::manifest(
            path,
            "(file)",
            format!(
                "failed to parse plugin manifest: the file has {size} bytes, more than the {MAX_MANIFEST_BYTES} a manifest may have"
            ),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| PluginError::manifest(path, "(file)", e.to_string()))?;
    json5::from_str(&text).map_err(|e| {
        let detail = match e {
            json5::Error::Message {
                msg,
                location: Some(l),
            } => format!("{msg} at line {}, column {}", l.line, l.column),
            json5::Error::Message {
                msg,
                location: None,
            } => msg,
        };
        PluginError::manifest(
            path,
            "(file)",
            format!("failed to parse plugin manifest: {detail}"),
        )
    })
}

fn opt_string(v: &Value, key: &str, file: &Path) -> Result<Option<String>, PluginError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(PluginError::manifest(
            file,
            key,
            format!("must be a string, got {other}"),
        )),
    }
}

/// Reads the manifest of the plugin in `dir` (the entry is resolved and checked, the config
/// is not validated: see [`PluginManifest::validate_config`]).
pub fn load_manifest(dir: &Path) -> Result<PluginManifest, PluginError> {
    let root = dir
        .canonicalize()
        .map_err(|e| PluginError::manifest(dir, "(directory)", e.to_string()))?;
    let Some(manifest_path) = find_manifest(&root) else {
        return Err(PluginError::manifest(
            root.join(MANIFEST_FILES[1]),
            "(file)",
            format!(
                "no {} or {} in the plugin directory",
                MANIFEST_FILES[0], MANIFEST_FILES[1]
            ),
        ));
    };
    let raw = read_manifest_file(&manifest_path)?;
    let file = manifest_path.as_path();
    if !raw.is_object() {
        return Err(PluginError::manifest(
            file,
            "(file)",
            "plugin manifest must be an object",
        ));
    }
    let id = match raw.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(other) => {
            return Err(PluginError::manifest(
                file,
                "id",
                format!("plugin manifest requires id: a non-empty string, got {other}"),
            ))
        }
        None => {
            return Err(PluginError::manifest(
                file,
                "id",
                "plugin manifest requires id",
            ))
        }
    };
    if RESERVED_IDS.contains(&id.as_str()) {
        return Err(PluginError::manifest(
            file,
            "id",
            format!("plugin manifest id \"{id}\" is reserved by OpenClaw core"),
        ));
    }
    if id.contains('/') || id.contains('\\') || id == "." || id == ".." {
        return Err(PluginError::manifest(
            file,
            "id",
            format!("\"{id}\" may not contain path separators"),
        ));
    }
    let kinds = match raw.get("kind") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|k| {
                k.as_str().map(str::to_owned).ok_or_else(|| {
                    PluginError::manifest(file, "kind", format!("entries must be strings, got {k}"))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(PluginError::manifest(
                file,
                "kind",
                format!("must be a string or an array of strings, got {other}"),
            ))
        }
    };
    let config_schema = match raw.get("configSchema") {
        None | Some(Value::Null) => {
            return Err(PluginError::manifest(
                file,
                "configSchema",
                format!(
                    "plugin manifest requires configSchema (OpenClaw refuses a manifest without one, even for a plugin without settings): add {EMPTY_CONFIG_SCHEMA} to {}",
                    file.display()
                ),
            ))
        }
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => {
            return Err(PluginError::manifest(
                file,
                "configSchema",
                format!("must be a JSON Schema object, got {other}"),
            ))
        }
    };
    if let Err(e) = jsonschema::validator_for(&config_schema) {
        return Err(PluginError::manifest(
            file,
            "configSchema",
            format!("is not a valid JSON Schema: {e}"),
        ));
    }
    let entry = resolve_entry(&root, &raw, file)?;
    Ok(PluginManifest {
        id,
        name: opt_string(&raw, "name", file)?,
        version: opt_string(&raw, "version", file)?,
        description: opt_string(&raw, "description", file)?,
        kinds,
        entry,
        config_schema,
        root,
        manifest_path,
        raw,
    })
}

fn resolve_entry(root: &Path, raw: &Value, file: &Path) -> Result<PluginEntry, PluginError> {
    let runtime = opt_string(raw, "runtime", file)?;
    for key in ["entry", "main"] {
        if let Some(v) = raw.get(key) {
            let s = v.as_str().ok_or_else(|| {
                PluginError::manifest(file, key, format!("must be a string path, got {v}"))
            })?;
            return file_entry(root, s, runtime.as_deref(), file, key);
        }
    }
    if let Some(v) = raw.get("command") {
        let parts: Vec<String> = match v {
            Value::String(s) => s.split_whitespace().map(str::to_owned).collect(),
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str().map(str::to_owned).ok_or_else(|| {
                        PluginError::manifest(
                            file,
                            "command",
                            format!("entries must be strings, got {x}"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(PluginError::manifest(
                    file,
                    "command",
                    format!("must be a string or an array of strings, got {other}"),
                ))
            }
        };
        let Some((program, args)) = parts.split_first() else {
            return Err(PluginError::manifest(file, "command", "is empty"));
        };
        let program = if program.contains('/') {
            let p = contained(root, program, file, "command")?;
            p.display().to_string()
        } else {
            program.clone()
        };
        return Ok(PluginEntry::Command {
            program,
            args: args.to_vec(),
        });
    }
    let pkg_path = root.join("package.json");
    let pkg = if pkg_path.is_file() {
        Some(read_json(&pkg_path)?)
    } else {
        None
    };
    if let Some(pkg) = &pkg {
        if let Some(entry) = package_extension_entry(root, pkg, &pkg_path, runtime.as_deref())? {
            return Ok(entry);
        }
    }
    // OpenClaw's convention for a plugin directory without `openclaw.extensions`.
    for candidate in ["index.ts", "index.js", "index.mjs", "index.cjs"] {
        if root.join(candidate).is_file() {
            return file_entry(root, candidate, runtime.as_deref(), file, "entry");
        }
    }
    if let Some(pkg) = &pkg {
        if let Some(v) = pkg.get("main") {
            let s = v.as_str().ok_or_else(|| {
                PluginError::manifest(&pkg_path, "main", format!("must be a string path, got {v}"))
            })?;
            return file_entry(root, s, runtime.as_deref(), &pkg_path, "main");
        }
    }
    for candidate in ["plugin.py", "__init__.py"] {
        if root.join(candidate).is_file() {
            return file_entry(root, candidate, runtime.as_deref(), file, "entry");
        }
    }
    Err(PluginError::manifest(
        file,
        "entry",
        "no entry: set `entry` (a .js/.mjs/.cjs/.ts module or a .py module), `command`, or package.json `openclaw.extensions`/`main`",
    ))
}

/// A `package.json` string list (`openclaw.extensions`, `openclaw.runtimeExtensions`);
/// absent is empty.
fn package_list(
    openclaw: Option<&Value>,
    key: &str,
    pkg_path: &Path,
) -> Result<Vec<String>, PluginError> {
    let full = format!("openclaw.{key}");
    match openclaw.and_then(|o| o.get(key)) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_str().map(str::trim) {
                Some(s) if !s.is_empty() => Ok(s.to_owned()),
                _ => Err(PluginError::manifest(
                    pkg_path,
                    &full,
                    format!("package.json {full}[{i}] must be a non-empty string, got {v}"),
                )),
            })
            .collect(),
        Some(other) => Err(PluginError::manifest(
            pkg_path,
            &full,
            format!("package.json {full} must be an array of paths, got {other}"),
        )),
    }
}

/// The built JavaScript OpenClaw looks for when a TypeScript entry was not shipped
/// (`listBuiltRuntimeEntryCandidates`): `./src/x.ts` → `./dist/x.{js,mjs,cjs}`, any other
/// `./x.ts` → `./dist/x.*`, then `./x.{js,mjs,cjs}` beside the source.
pub fn built_entry_candidates(entry: &str) -> Vec<String> {
    let normalized = entry.replace('\\', "/");
    let ext = Path::new(&normalized)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("ts" | "mts" | "cts")) {
        return Vec::new();
    }
    let without_ext = match normalized.rfind('.') {
        Some(dot) => normalized[..dot].to_owned(),
        None => normalized.clone(),
    };
    let relative = without_ext.trim_start_matches("./");
    let dist = match relative.strip_prefix("src/") {
        Some(rest) => format!("./dist/{rest}"),
        None => format!("./dist/{relative}"),
    };
    let mut out: Vec<String> = Vec::new();
    for base in [dist, without_ext] {
        for js in ["js", "mjs", "cjs"] {
            let candidate = format!("{base}.{js}");
            if candidate != normalized && !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// The entry named by `package.json` `openclaw.extensions` (OpenClaw's source of entries), or
/// `None` when it names none. For the first entry: its `openclaw.runtimeExtensions` twin when
/// that exists, else the entry itself, else the built JavaScript inferred for a TypeScript
/// entry. clawctx runs one entry per plugin: a package that lists more loads its first.
fn package_extension_entry(
    root: &Path,
    pkg: &Value,
    pkg_path: &Path,
    runtime: Option<&str>,
) -> Result<Option<PluginEntry>, PluginError> {
    let openclaw = pkg.get("openclaw");
    let extensions = package_list(openclaw, "extensions", pkg_path)?;
    let runtime_extensions = package_list(openclaw, "runtimeExtensions", pkg_path)?;
    let Some(first) = extensions.first() else {
        return Ok(None);
    };
    if !runtime_extensions.is_empty() && runtime_extensions.len() != extensions.len() {
        return Err(PluginError::manifest(
            pkg_path,
            "openclaw.runtimeExtensions",
            format!(
                "package.json openclaw.runtimeExtensions length ({}) must match openclaw.extensions length ({})",
                runtime_extensions.len(),
                extensions.len()
            ),
        ));
    }
    if first.ends_with(".d.ts") {
        return Err(PluginError::manifest(
            pkg_path,
            "openclaw.extensions",
            format!("\"{first}\" is a type declaration file, not a module that can be loaded"),
        ));
    }
    // The source entry must stay inside the package even when a built twin is what runs.
    let source = Path::new(first);
    if source.is_absolute()
        || source
            .components()
            .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(PluginError::manifest(
            pkg_path,
            "openclaw.extensions",
            format!("\"{first}\" escapes the plugin root"),
        ));
    }
    if let Some(built) = runtime_extensions.first() {
        if root.join(built).is_file() {
            return file_entry(root, built, runtime, pkg_path, "openclaw.runtimeExtensions")
                .map(Some);
        }
    }
    if root.join(first).is_file() {
        return file_entry(root, first, runtime, pkg_path, "openclaw.extensions").map(Some);
    }
    if let Some(built) = built_entry_candidates(first)
        .into_iter()
        .find(|c| root.join(c).is_file())
    {
        return file_entry(root, &built, runtime, pkg_path, "openclaw.extensions").map(Some);
    }
    let mut tried = vec![first.clone()];
    tried.extend(runtime_extensions.first().cloned());
    tried.extend(built_entry_candidates(first));
    Err(PluginError::manifest(
        pkg_path,
        "openclaw.extensions",
        format!(
            "extension entry not found: \"{first}\" (looked for {}) in the plugin root",
            tried.join(", ")
        ),
    ))
}

/// Resolves `rel` inside `root`, refusing anything that escapes it (`..`, absolute paths,
/// symlinks pointing outside).
fn contained(root: &Path, rel: &str, file: &Path, key: &str) -> Result<PathBuf, PluginError> {
    let p = Path::new(rel);
    if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(PluginError::manifest(
            file,
            key,
            format!("\"{rel}\" escapes the plugin root"),
        ));
    }
    let joined = root.join(p);
    let canon = joined.canonicalize().map_err(|e| {
        PluginError::manifest(
            file,
            key,
            format!("\"{rel}\" not found in the plugin root: {e}"),
        )
    })?;
    if !canon.starts_with(root) {
        return Err(PluginError::manifest(
            file,
            key,
            format!("\"{rel}\" escapes the plugin root"),
        ));
    }
    Ok(canon)
}

fn file_entry(
    root: &Path,
    rel: &str,
    runtime: Option<&str>,
    file: &Path,
    key: &str,
) -> Result<PluginEntry, PluginError> {
    let path = contained(root, rel, file, key)?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let is_python = runtime == Some("python")
        || ext == "py"
        || (path.is_dir() && path.join("__init__.py").is_file());
    if is_python {
        return Ok(PluginEntry::Python(path));
    }
    match ext {
        "js" | "mjs" | "cjs" | "ts" | "mts" | "cts" => Ok(PluginEntry::Node(path)),
        _ if runtime == Some("node") => Ok(PluginEntry::Node(path)),
        _ => Err(PluginError::manifest(
            file,
            key,
            format!("\"{rel}\" is neither a JavaScript/TypeScript module nor a Python module (set `runtime`)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_paths() {
        assert_eq!(pointer_to_path(""), "");
        assert_eq!(pointer_to_path("/a/0/b~1c"), ".a[0].b/c");
    }
}
