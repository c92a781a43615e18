//! Why a plugin did not load, precisely: what kind of failure, in which module, what the
//! plugin printed, and what the operator can do about it.
//!
//! Someone who installs a plugin published by others did not write it and should not have to
//! read its code to learn that a package is missing (run `npm install`), a file was never
//! built, a module has a syntax error, the entry exports no `register` function or the
//! plugin's `register` threw. Those are different fixes, yet they used to reach the operator
//! as one opaque message, recorded as a `factory` failure at the first resolve.
//!
//! The Node runner classifies a failure where it happens (it holds the error object, with its
//! code, message and stack) and answers `initialize` with the classification in
//! `error.data.load` (`docs/plugin-protocol.md`). [`classify`] turns that answer, or a process
//! that died while loading, into a [`LoadError`]: the kind, the module at fault, the plugin's
//! stderr tail and a suggested fix. `register_plugin` records it as a quarantine with
//! operation `load`; `clawctx doctor` shows it with the fix.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::PluginError;
use crate::manifest::{PluginEntry, PluginManifest};

/// What kind of load failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadErrorKind {
    /// A module imports a package that is not installed.
    MissingPackage,
    /// A module imports a file that does not exist (often: the plugin was not built).
    MissingModule,
    /// A module imports an `openclaw/plugin-sdk/*` module clawctx does not provide.
    MissingSdkModule,
    /// A module imports a name the clawctx SDK module does not export.
    MissingSdkExport,
    /// A module is not valid JavaScript (or TypeScript).
    Syntax,
    /// A module's top-level code threw while it was loaded.
    ImportThrew,
    /// The entry exports no `register(api)` function (OpenClaw: `plugin export missing
    /// register/activate`).
    NoRegister,
    /// The plugin's `register(api)` threw (OpenClaw: `plugin failed during register: …`).
    RegisterThrew,
    /// The entry's `definePluginEntry({id})` differs from the manifest id.
    IdMismatch,
    /// The process ended while loading.
    Exited,
    /// Anything else the runner reported.
    Other,
}

impl LoadErrorKind {
    /// The wire name (`missing-package`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingPackage => "missing-package",
            Self::MissingModule => "missing-module",
            Self::MissingSdkModule => "missing-sdk-module",
            Self::MissingSdkExport => "missing-sdk-export",
            Self::Syntax => "syntax",
            Self::ImportThrew => "import-threw",
            Self::NoRegister => "no-register",
            Self::RegisterThrew => "register-threw",
            Self::IdMismatch => "id-mismatch",
            Self::Exited => "exited",
            Self::Other => "other",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "missing-package" => Self::MissingPackage,
            "missing-module" => Self::MissingModule,
            "missing-sdk-module" => Self::MissingSdkModule,
            "missing-sdk-export" => Self::MissingSdkExport,
            "syntax" => Self::Syntax,
            "import-threw" => Self::ImportThrew,
            "no-register" => Self::NoRegister,
            "register-threw" => Self::RegisterThrew,
            "id-mismatch" => Self::IdMismatch,
            "exited" => Self::Exited,
            _ => Self::Other,
        }
    }

    /// In words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::MissingPackage => "a package it imports is not installed",
            Self::MissingModule => "a file it imports does not exist",
            Self::MissingSdkModule => "it imports an OpenClaw SDK module clawctx does not provide",
            Self::MissingSdkExport => "it imports a name the clawctx SDK does not export",
            Self::Syntax => "syntax error",
            Self::ImportThrew => "a module threw while it was loaded",
            Self::NoRegister => "the entry exports no register function",
            Self::RegisterThrew => "its register(api) threw",
            Self::IdMismatch => "its entry declares another plugin id",
            Self::Exited => "the process exited while loading",
            Self::Other => "load failure",
        }
    }
}

impl fmt::Display for LoadErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin that did not load, with what is known about why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadError {
    /// The plugin.
    pub plugin_id: String,
    /// Its root directory.
    pub root: PathBuf,
    /// Its entry module, when it has one.
    pub entry: Option<PathBuf>,
    /// The kind of failure.
    pub kind: LoadErrorKind,
    /// The runner's message (OpenClaw's words: `failed to load plugin: …`,
    /// `plugin failed during register: …`, `plugin export missing register/activate`).
    pub message: String,
    /// The module at fault: the importer of a missing package or file, the file with the
    /// syntax error, the entry without `register`, where `register` threw.
    pub module: Option<PathBuf>,
    /// Line in `module`, when known.
    pub line: Option<u64>,
    /// Column in `module`, when known.
    pub column: Option<u64>,
    /// The import specifier that failed (`some-dep`, `./lib/x.js`,
    /// `openclaw/plugin-sdk/routing`).
    pub specifier: Option<String>,
    /// The missing package's name (`some-dep`, `@scope/pkg`).
    pub package: Option<String>,
    /// The name a module imports that the SDK does not export.
    pub export_name: Option<String>,
    /// What the plugin wrote to stderr while it loaded (its last 8 KiB).
    pub stderr_tail: String,
    /// What the operator can do about it.
    pub fix: Option<String>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())?;
        if !self.stderr_tail.is_empty() && !self.message.contains(&self.stderr_tail) {
            write!(f, "; stderr: {}", self.stderr_tail)?;
        }
        Ok(())
    }
}

impl LoadError {
    /// The message, the kind and the module at fault, without the stderr tail (the
    /// [`Display`](fmt::Display) form appends it).
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{} (plugin \"{}\": {}",
            self.message,
            self.plugin_id,
            self.kind.describe()
        );
        if let Some(m) = &self.module {
            let at = self.location(m);
            if !self.message.contains(&at) {
                out.push_str(", in ");
                out.push_str(&at);
            }
        }
        out.push(')');
        out
    }

    /// `module:line:column`, as far as known.
    fn location(&self, module: &Path) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}", module.display()),
            (Some(l), None) => format!("{}:{l}", module.display()),
            _ => module.display().to_string(),
        }
    }

    /// The suggested fix for this failure, in words.
    fn suggest(&self, manifest_path: &Path) -> Option<String> {
        let root = self.root.display();
        let module = self
            .module
            .as_deref()
            .map(|m| self.location(m))
            .unwrap_or_else(|| "the plugin".to_owned());
        match self.kind {
            LoadErrorKind::MissingPackage => {
                let package = self.package.as_deref().unwrap_or("?");
                let inside_dependency = self
                    .module
                    .as_deref()
                    .is_some_and(|m| m.starts_with(self.root.join("node_modules")));
                let declared = declared_dependency(&self.root, package);
                Some(if inside_dependency {
                    format!(
                        "package `{package}` is imported by {module} but is not installed: the plugin's dependencies are incomplete; run `npm install` in {root}"
                    )
                } else if let Some(field) = declared {
                    format!(
                        "package `{package}` is imported by {module} but is not installed: package.json lists it in `{field}`; run `npm install` in {root}"
                    )
                } else {
                    format!(
                        "package `{package}` is imported by {module} but is not installed: run `npm install {package}` in {root}"
                    )
                })
            }
            LoadErrorKind::MissingModule => {
                let what = self.specifier.as_deref().unwrap_or("a file");
                Some(format!(
                    "`{what}`, imported by {module}, does not exist: build the plugin (e.g. `npm run build`) in {root}, or fix the import"
                ))
            }
            LoadErrorKind::MissingSdkModule => {
                let what = self.specifier.as_deref().unwrap_or("an SDK module");
                Some(format!(
                    "`{what}`, imported by {module}, is an OpenClaw SDK module clawctx does not provide (clawctx has openclaw/plugin-sdk, openclaw/plugin-sdk/core and openclaw/plugin-sdk/plugin-entry; docs/openclaw-compat.md lists what each offers): this plugin needs a host that has it"
                ))
            }
            LoadErrorKind::MissingSdkExport => {
                let what = self.specifier.as_deref().unwrap_or("the SDK");
                let name = self.export_name.as_deref().unwrap_or("?");
                Some(format!(
                    "{module} imports `{name}` from `{what}`, which clawctx's SDK does not export (docs/openclaw-compat.md lists what it offers): this plugin needs a host that has it"
                ))
            }
            LoadErrorKind::Syntax => Some(format!(
                "{module} is not valid JavaScript: fix it there; if it is build output, build the plugin again (e.g. `npm run build`) in {root}"
            )),
            LoadErrorKind::ImportThrew => Some(format!(
                "{module} threw while it was loaded (its top-level code ran and failed): the message says why; check what the plugin needs from its environment"
            )),
            LoadErrorKind::NoRegister => {
                let entry = self
                    .entry
                    .as_deref()
                    .map(|e| e.display().to_string())
                    .unwrap_or_else(|| "the entry".to_owned());
                Some(format!(
                    "{entry} must export the plugin's register(api) function (as the default export, as `register`, or as definePluginEntry({{ register }})): if it is not the plugin's entry, point `openclaw.extensions` in {root}/package.json (or `entry` in {}) at the one that is",
                    manifest_path.display()
                ))
            }
            LoadErrorKind::RegisterThrew => Some(format!(
                "the plugin's register(api) threw at {module}: check plugins.entries.{}.config and what the plugin needs from its environment (its stderr is above)",
                self.plugin_id
            )),
            LoadErrorKind::IdMismatch => Some(format!(
                "make the ids agree: `id` in {} or the id the entry passes to definePluginEntry",
                manifest_path.display()
            )),
            LoadErrorKind::Exited => Some(
                "the plugin process exited while it loaded: its stderr says why".to_owned(),
            ),
            LoadErrorKind::Other => None,
        }
    }
}

/// The `package.json` dependency field of the plugin root that lists `package`, if any.
fn declared_dependency(root: &Path, package: &str) -> Option<&'static str> {
    let text = std::fs::read_to_string(root.join("package.json")).ok()?;
    let pkg: Value = serde_json::from_str(&text).ok()?;
    [
        "dependencies",
        "peerDependencies",
        "optionalDependencies",
        "devDependencies",
    ]
    .into_iter()
    .find(|field| pkg.get(*field).and_then(|d| d.get(package)).is_some())
}

fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Turns the error of a failed start into a [`PluginError::Load`] when it is a load failure:
/// the runner's classified `initialize` error (`error.data.load`), any other error answer to
/// `initialize`, or a process that exited before answering. Timeouts and spawn failures stay
/// as they are (they may pass; the retrying factory tries again).
pub fn classify(err: PluginError, manifest: &PluginManifest) -> PluginError {
    let entry = match &manifest.entry {
        PluginEntry::Node(p) | PluginEntry::Python(p) => Some(p.clone()),
        PluginEntry::Command { .. } => None,
    };
    let mut load = LoadError {
        plugin_id: manifest.id.clone(),
        root: manifest.root.clone(),
        entry,
        kind: LoadErrorKind::Other,
        message: String::new(),
        module: None,
        line: None,
        column: None,
        specifier: None,
        package: None,
        export_name: None,
        stderr_tail: String::new(),
        fix: None,
    };
    match err {
        PluginError::Remote { message, data, .. } => {
            load.message = message;
            if let Some(d) = data.as_ref().and_then(|d| d.get("load")) {
                load.kind = d
                    .get("kind")
                    .and_then(Value::as_str)
                    .map(LoadErrorKind::parse)
                    .unwrap_or(LoadErrorKind::Other);
                load.module = opt_str(d, "module").map(PathBuf::from);
                load.line = d.get("line").and_then(Value::as_u64);
                load.column = d.get("column").and_then(Value::as_u64);
                load.specifier = opt_str(d, "specifier");
                load.package = opt_str(d, "package");
                load.export_name = opt_str(d, "exportName");
                load.stderr_tail = opt_str(d, "stderrTail").unwrap_or_default();
            }
        }
        PluginError::Dead(reason) => {
            load.kind = LoadErrorKind::Exited;
            load.message = reason;
        }
        other => return other,
    }
    load.fix = load.suggest(&manifest.manifest_path);
    PluginError::Load(Box::new(load))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in [
            LoadErrorKind::MissingPackage,
            LoadErrorKind::MissingModule,
            LoadErrorKind::MissingSdkModule,
            LoadErrorKind::MissingSdkExport,
            LoadErrorKind::Syntax,
            LoadErrorKind::ImportThrew,
            LoadErrorKind::NoRegister,
            LoadErrorKind::RegisterThrew,
            LoadErrorKind::IdMismatch,
            LoadErrorKind::Exited,
            LoadErrorKind::Other,
        ] {
            assert_eq!(LoadErrorKind::parse(k.as_str()), k);
            assert_eq!(
                serde_json::to_value(k).ok(),
                Some(Value::String(k.as_str().into()))
            );
        }
    }
}
