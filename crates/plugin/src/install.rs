//! Install state: `clawctx plugins install|list|info|uninstall` as library functions
//! (contract §11).
//!
//! Installed plugins live under `<stateDir>/plugins/<id>` (a copy), under
//! `<stateDir>/plugins/npm/node_modules/<pkg>` (npm: a registry spec, or a package archive
//! made by `npm pack`, whose name is read from the archive's `package/package.json`), or where
//! they are (a link: OpenClaw adds the directory to `plugins.load.paths`). The machine-managed index is
//! `<stateDir>/plugins/installs.json`, always written atomically (temp file + rename). User
//! config is never written here: every function that would change it returns the changes as
//! [`ConfigChange`]s, which the CLI shows and applies with [`apply_changes`].
//!
//! Safety: a plugin is code clawctx runs with the user's rights. Installing (or linking) from a
//! directory that someone else could change is refused: the plugin directory, its manifest
//! and its entry must not be world-writable, and must belong to the user running clawctx (or
//! to root). The error names the path and the command that fixes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::PluginError;
use crate::manifest::{load_manifest, PluginManifest};

/// The index file name under `<stateDir>/plugins/`.
pub const INDEX_FILE: &str = "installs.json";

/// Where an installed plugin came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstallSource {
    /// Copied from a local directory.
    Path,
    /// Linked in place (`-l/--link`).
    Link,
    /// Installed from npm.
    Npm,
}

/// One install record in `installs.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallRecord {
    /// Plugin id (from the manifest).
    pub id: String,
    /// Where it came from.
    pub source: InstallSource,
    /// What the operator typed (path or npm spec).
    pub spec: String,
    /// The plugin root that is loaded.
    pub install_path: PathBuf,
    /// Manifest version, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Manifest kinds.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Epoch ms.
    pub installed_at: u64,
}

/// The install index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallIndex {
    /// Format version (1).
    pub version: u32,
    /// Records by plugin id.
    pub installs: BTreeMap<String, InstallRecord>,
}

/// A change to the user's config, described rather than written.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "op")]
pub enum ConfigChange {
    /// Set `path` to `value`.
    Set {
        /// Dotted key path as segments.
        path: Vec<String>,
        /// New value.
        value: Value,
    },
    /// Append `value` to the array at `path` unless present.
    AppendUnique {
        /// Array path.
        path: Vec<String>,
        /// Element.
        value: Value,
    },
    /// Remove `value` from the array at `path`.
    RemoveFromArray {
        /// Array path.
        path: Vec<String>,
        /// Element.
        value: Value,
    },
    /// Delete the key at `path`.
    Remove {
        /// Key path.
        path: Vec<String>,
    },
}

fn p(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

impl ConfigChange {
    /// One line for the operator, e.g. `set plugins.slots.contextEngine = "my-engine"`.
    pub fn describe(&self) -> String {
        match self {
            ConfigChange::Set { path, value } => format!("set {} = {value}", path.join(".")),
            ConfigChange::AppendUnique { path, value } => {
                format!("add {value} to {}", path.join("."))
            }
            ConfigChange::RemoveFromArray { path, value } => {
                format!("remove {value} from {}", path.join("."))
            }
            ConfigChange::Remove { path } => format!("remove {}", path.join(".")),
        }
    }

    /// Applies the change to a config value (creating objects on the way).
    pub fn apply(&self, config: &mut Value) {
        fn parent<'a>(
            config: &'a mut Value,
            path: &[String],
        ) -> Option<&'a mut serde_json::Map<String, Value>> {
            let mut cur = config;
            for key in path {
                if !cur.is_object() {
                    *cur = Value::Object(Default::default());
                }
                cur = cur
                    .as_object_mut()?
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Default::default()));
            }
            if !cur.is_object() {
                *cur = Value::Object(Default::default());
            }
            cur.as_object_mut()
        }
        match self {
            ConfigChange::Set { path, value } => {
                if let Some((last, init)) = path.split_last() {
                    if let Some(obj) = parent(config, init) {
                        obj.insert(last.clone(), value.clone());
                    }
                }
            }
            ConfigChange::AppendUnique { path, value }
            | ConfigChange::RemoveFromArray { path, value } => {
                let Some((last, init)) = path.split_last() else {
                    return;
                };
                let Some(obj) = parent(config, init) else {
                    return;
                };
                let arr = obj
                    .entry(last.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if !arr.is_array() {
                    *arr = Value::Array(Vec::new());
                }
                if let Value::Array(a) = arr {
                    if matches!(self, ConfigChange::AppendUnique { .. }) {
                        if !a.contains(value) {
                            a.push(value.clone());
                        }
                    } else {
                        a.retain(|x| x != value);
                    }
                }
            }
            ConfigChange::Remove { path } => {
                let Some((last, init)) = path.split_last() else {
                    return;
                };
                let mut cur = &mut *config;
                for key in init {
                    match cur.get_mut(key) {
                        Some(next) => cur = next,
                        None => return,
                    }
                }
                if let Some(obj) = cur.as_object_mut() {
                    obj.remove(last);
                }
            }
        }
    }
}

/// Applies every change in order.
pub fn apply_changes(config: &mut Value, changes: &[ConfigChange]) {
    for c in changes {
        c.apply(config);
    }
}

/// Options of [`install_with`].
#[derive(Clone, Debug, Default)]
pub struct InstallOptions {
    /// `-l/--link`: record the directory without copying.
    pub link: bool,
    /// `--force`: overwrite an existing install (not allowed with `link`).
    pub force: bool,
}

/// What an install did.
#[derive(Clone, Debug)]
pub struct InstallReport {
    /// The new record.
    pub record: InstallRecord,
    /// The plugin's manifest.
    pub manifest: PluginManifest,
    /// Config changes to apply: enable the plugin, select it for the `contextEngine` slot when
    /// it is a context engine, and (for a link) add it to `plugins.load.paths`.
    pub config_changes: Vec<ConfigChange>,
}

/// What an uninstall did.
#[derive(Clone, Debug)]
pub struct UninstallReport {
    /// The removed record.
    pub record: InstallRecord,
    /// Whether files were deleted (never for links).
    pub removed_files: bool,
    /// Config changes to apply.
    pub config_changes: Vec<ConfigChange>,
}

/// `<stateDir>/plugins`.
pub fn plugins_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("plugins")
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> PluginError {
    PluginError::Install(format!("{what} {}: {e}", path.display()))
}

/// Reads the index (empty when missing).
pub fn read_index(state_dir: &Path) -> Result<InstallIndex, PluginError> {
    let path = plugins_dir(state_dir).join(INDEX_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| PluginError::Install(format!("{} is corrupt: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(InstallIndex {
            version: 1,
            installs: BTreeMap::new(),
        }),
        Err(e) => Err(io_err("cannot read", &path, e)),
    }
}

/// Writes the index atomically (temp file in the same directory, then rename).
pub fn write_index(state_dir: &Path, index: &InstallIndex) -> Result<(), PluginError> {
    let dir = plugins_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_err("cannot create", &dir, e))?;
    let path = dir.join(INDEX_FILE);
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .map_err(|e| io_err("cannot create a temp file in", &dir, e))?;
    let text =
        serde_json::to_string_pretty(index).map_err(|e| PluginError::Install(e.to_string()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())
        .map_err(|e| io_err("cannot write", tmp.path(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| io_err("cannot sync", tmp.path(), e))?;
    tmp.persist(&path)
        .map_err(|e| io_err("cannot replace", &path, e.error))?;
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn looks_like_path(spec: &str) -> bool {
    spec.starts_with('.')
        || spec.starts_with('/')
        || spec.starts_with('~')
        || Path::new(spec).exists()
}

/// A package archive (`npm pack` output) by its file name.
fn is_archive(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    [".tgz", ".tar.gz", ".tar"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

/// The `name` in an archive's `package/package.json` (the layout `npm pack` writes), read with
/// `tar`.
fn archive_package_name(file: &Path) -> Result<String, PluginError> {
    if !file.is_file() {
        return Err(PluginError::Install(format!(
            "{}: no such package archive",
            file.display()
        )));
    }
    let out = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(file)
        .arg("package/package.json")
        .output()
        .map_err(|e| PluginError::Install(format!("cannot run tar: {e}")))?;
    if !out.status.success() {
        return Err(PluginError::Install(format!(
            "{}: not a package archive with package/package.json ({})",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let pkg: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        PluginError::Install(format!(
            "{}: package/package.json is not JSON: {e}",
            file.display()
        ))
    })?;
    match pkg.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() && !name.contains("..") => Ok(name.to_owned()),
        _ => Err(PluginError::Install(format!(
            "{}: package/package.json has no usable \"name\"",
            file.display()
        ))),
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), PluginError> {
    std::fs::create_dir_all(to).map_err(|e| io_err("cannot create", to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io_err("cannot read", from, e))? {
        let entry = entry.map_err(|e| io_err("cannot read", from, e))?;
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        let ft = entry
            .file_type()
            .map_err(|e| io_err("cannot stat", &src, e))?;
        if ft.is_dir() {
            copy_dir(&src, &dst)?;
        } else if ft.is_symlink() {
            let target =
                std::fs::read_link(&src).map_err(|e| io_err("cannot read link", &src, e))?;
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| io_err("cannot create link", &dst, e))?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| io_err("cannot copy", &src, e))?;
        }
    }
    Ok(())
}

/// The config changes that enable an installed plugin (and select it when it is a context
/// engine: the engine id is expected to equal the plugin id, as OpenClaw requires; a host that
/// can start the plugin replaces the slot change with the engine it registers, see
/// [`engine_to_select`]).
pub fn enable_changes(manifest: &PluginManifest) -> Vec<ConfigChange> {
    let mut changes = vec![ConfigChange::Set {
        path: p(&["plugins", "entries", &manifest.id, "enabled"]),
        value: Value::Bool(true),
    }];
    if manifest.is_context_engine() {
        changes.push(ConfigChange::Set {
            path: p(&["plugins", "slots", "contextEngine"]),
            value: Value::String(manifest.id.clone()),
        });
    }
    changes
}

/// Which engine `plugins install` selects for a plugin that registered `engines` when it was
/// started: OpenClaw selects by plugin id, so a plugin whose engine id is its plugin id (or
/// that registers one engine) is unambiguous. A plugin registering several engines, none of
/// them its own id, is refused with the ids to choose from: selecting the plugin id would name
/// an engine that does not exist (`doctor`: "not registered").
pub fn engine_to_select(plugin_id: &str, engines: &[String]) -> Result<String, String> {
    if engines.iter().any(|e| e == plugin_id) {
        return Ok(plugin_id.to_owned());
    }
    match engines {
        [] => Err(format!(
            "plugin {plugin_id} registered no context engine when it was started"
        )),
        [one] => Ok(one.clone()),
        many => Err(format!(
            "plugin {plugin_id} registers several context engines ({}); select one with \
             `clawctx config set plugins.slots.contextEngine <id>`",
            many.join(", ")
        )),
    }
}

/// The slot change of [`enable_changes`], to be replaced by the engine the plugin registers.
pub fn is_slot_change(change: &ConfigChange) -> bool {
    matches!(change, ConfigChange::Set { path, .. } if path == &p(&["plugins", "slots", "contextEngine"]))
}

/// The change selecting `engine_id` for the `contextEngine` slot.
pub fn select_engine_change(engine_id: &str) -> ConfigChange {
    ConfigChange::Set {
        path: p(&["plugins", "slots", "contextEngine"]),
        value: Value::String(engine_id.to_owned()),
    }
}

/// `clawctx plugins install <path-or-npm-spec> [-l]`.
pub fn install(spec: &str, state_dir: &Path, link: bool) -> Result<InstallReport, PluginError> {
    install_with(spec, state_dir, &InstallOptions { link, force: false })
}

/// [`install`] with every option.
pub fn install_with(
    spec: &str,
    state_dir: &Path,
    opts: &InstallOptions,
) -> Result<InstallReport, PluginError> {
    if opts.link && opts.force {
        return Err(PluginError::Install(
            "--force is not allowed together with --link".into(),
        ));
    }
    let mut index = read_index(state_dir)?;
    let dir = plugins_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_err("cannot create", &dir, e))?;
    let archive = is_archive(spec);
    let (record, manifest, mut changes) = if looks_like_path(spec) && !archive {
        let src = PathBuf::from(spec);
        let manifest = load_manifest(&src)?;
        check_plugin_paths(&manifest, nix::unistd::geteuid().as_raw())?;
        check_existing(&index, &manifest.id, opts.force)?;
        if opts.link {
            let record = new_record(&manifest, InstallSource::Link, spec, manifest.root.clone());
            let changes = vec![ConfigChange::AppendUnique {
                path: p(&["plugins", "load", "paths"]),
                value: Value::String(manifest.root.display().to_string()),
            }];
            (record, manifest, changes)
        } else {
            let dest = dir.join(&manifest.id);
            let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
            copy_dir(&manifest.root, &tmp)?;
            if dest.exists() {
                std::fs::remove_dir_all(&dest).map_err(|e| io_err("cannot remove", &dest, e))?;
            }
            std::fs::rename(&tmp, &dest).map_err(|e| io_err("cannot move into place", &dest, e))?;
            let manifest = load_manifest(&dest)?;
            let record = new_record(&manifest, InstallSource::Path, spec, manifest.root.clone());
            (record, manifest, Vec::new())
        }
    } else {
        if opts.link {
            return Err(PluginError::Install(format!(
                "--link needs a local directory, got \"{spec}\""
            )));
        }
        let prefix = dir.join("npm");
        std::fs::create_dir_all(&prefix).map_err(|e| io_err("cannot create", &prefix, e))?;
        // An archive is named by its absolute path: npm runs with the prefix as its directory.
        let (npm_spec, pkg) = if archive {
            let file =
                std::path::absolute(spec).map_err(|e| io_err("cannot find", Path::new(spec), e))?;
            let pkg = archive_package_name(&file)?;
            (file.display().to_string(), pkg)
        } else {
            (spec.to_owned(), npm_package_name(spec))
        };
        let out = std::process::Command::new("npm")
            .arg("install")
            .arg("--no-audit")
            .arg("--no-fund")
            .arg("--prefix")
            .arg(&prefix)
            .arg(&npm_spec)
            .output()
            .map_err(|e| PluginError::Install(format!("cannot run npm: {e}")))?;
        if !out.status.success() {
            return Err(PluginError::Install(format!(
                "npm install {spec} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let root = prefix.join("node_modules").join(&pkg);
        let manifest = load_manifest(&root)?;
        check_existing(&index, &manifest.id, true)?;
        let record = new_record(&manifest, InstallSource::Npm, spec, manifest.root.clone());
        (record, manifest, Vec::new())
    };
    changes.extend(enable_changes(&manifest));
    index.version = 1;
    index.installs.insert(record.id.clone(), record.clone());
    write_index(state_dir, &index)?;
    Ok(InstallReport {
        record,
        manifest,
        config_changes: changes,
    })
}

/// Refuses a plugin whose directory, manifest or entry another user could change (see the
/// module header). `euid` is the user clawctx runs as.
fn check_plugin_paths(manifest: &PluginManifest, euid: u32) -> Result<(), PluginError> {
    use std::os::unix::fs::MetadataExt;
    let mut paths = vec![manifest.root.clone(), manifest.manifest_path.clone()];
    if let crate::manifest::PluginEntry::Node(p) | crate::manifest::PluginEntry::Python(p) =
        &manifest.entry
    {
        paths.push(p.clone());
    }
    for path in paths {
        let meta = std::fs::metadata(&path).map_err(|e| io_err("cannot inspect", &path, e))?;
        let refuse = |why: String, fix: String| {
            PluginError::Install(format!(
                "refusing to install plugin \"{}\": {} {why}, so another user could change the code clawctx would run; fix it with `{fix}` and install again",
                manifest.id,
                path.display()
            ))
        };
        let mode = meta.mode() & 0o7777;
        if mode & 0o002 != 0 {
            return Err(refuse(
                format!("is world-writable (mode {mode:o})"),
                format!("chmod o-w {}", path.display()),
            ));
        }
        let owner = meta.uid();
        if owner != euid && owner != 0 {
            return Err(refuse(
                format!("is owned by uid {owner}, not by you (uid {euid}) or root"),
                format!("chown {euid} {}", path.display()),
            ));
        }
    }
    Ok(())
}

fn check_existing(index: &InstallIndex, id: &str, force: bool) -> Result<(), PluginError> {
    if index.installs.contains_key(id) && !force {
        return Err(PluginError::Install(format!(
            "plugin \"{id}\" is already installed (uninstall it first, or use --force)"
        )));
    }
    Ok(())
}

fn new_record(
    m: &PluginManifest,
    source: InstallSource,
    spec: &str,
    path: PathBuf,
) -> InstallRecord {
    InstallRecord {
        id: m.id.clone(),
        source,
        spec: spec.to_owned(),
        install_path: path,
        version: m.version.clone(),
        kinds: m.kinds.clone(),
        installed_at: now_ms(),
    }
}

/// The package name of an npm spec (`@scope/name@1.2` → `@scope/name`).
pub fn npm_package_name(spec: &str) -> String {
    let spec = spec.strip_prefix("npm:").unwrap_or(spec);
    if let Some(rest) = spec.strip_prefix('@') {
        match rest.find('@') {
            Some(i) => format!("@{}", &rest[..i]),
            None => spec.to_owned(),
        }
    } else {
        spec.split('@').next().unwrap_or(spec).to_owned()
    }
}

/// `clawctx plugins list`: every record, by id.
pub fn list(state_dir: &Path) -> Result<Vec<InstallRecord>, PluginError> {
    Ok(read_index(state_dir)?.installs.into_values().collect())
}

/// `clawctx plugins info <id>`: the record and the manifest as it is on disk now.
pub fn info(
    state_dir: &Path,
    id: &str,
) -> Result<(InstallRecord, Result<PluginManifest, PluginError>), PluginError> {
    let index = read_index(state_dir)?;
    let record = index
        .installs
        .get(id)
        .cloned()
        .ok_or_else(|| PluginError::NotInstalled(id.to_owned()))?;
    let manifest = load_manifest(&record.install_path);
    Ok((record, manifest))
}

/// `clawctx plugins uninstall <id> [--keep-files]`. `config` is the current config: the
/// returned changes remove `plugins.entries.<id>`, the link path, and reset
/// `plugins.slots.contextEngine` to `legacy` when it pointed at this plugin.
pub fn uninstall(
    state_dir: &Path,
    id: &str,
    config: &Value,
    keep_files: bool,
) -> Result<UninstallReport, PluginError> {
    let mut index = read_index(state_dir)?;
    let record = index
        .installs
        .remove(id)
        .ok_or_else(|| PluginError::NotInstalled(id.to_owned()))?;
    let mut removed_files = false;
    if record.source == InstallSource::Path && !keep_files {
        let managed = plugins_dir(state_dir).join(&record.id);
        if record.install_path == managed
            || record
                .install_path
                .starts_with(plugins_dir(state_dir).canonicalize().unwrap_or_default())
        {
            if record.install_path.exists() {
                std::fs::remove_dir_all(&record.install_path)
                    .map_err(|e| io_err("cannot remove", &record.install_path, e))?;
            }
            removed_files = true;
        }
    }
    let mut changes = vec![ConfigChange::Remove {
        path: p(&["plugins", "entries", id]),
    }];
    if record.source == InstallSource::Link {
        changes.push(ConfigChange::RemoveFromArray {
            path: p(&["plugins", "load", "paths"]),
            value: Value::String(record.install_path.display().to_string()),
        });
    }
    let slot = config
        .pointer("/plugins/slots/contextEngine")
        .and_then(Value::as_str)
        .map(str::trim);
    if slot == Some(id) {
        changes.push(ConfigChange::Set {
            path: p(&["plugins", "slots", "contextEngine"]),
            value: Value::String("legacy".into()),
        });
    }
    write_index(state_dir, &index)?;
    Ok(UninstallReport {
        record,
        removed_files,
        config_changes: changes,
    })
}

/// Every plugin directory to load: installed plugins (index order) plus `plugins.load.paths`,
/// without duplicates.
pub fn plugin_dirs(state_dir: &Path, config: &Value) -> Result<Vec<PathBuf>, PluginError> {
    let mut out: Vec<PathBuf> = list(state_dir)?
        .into_iter()
        .map(|r| r.install_path)
        .collect();
    if let Some(paths) = config
        .pointer("/plugins/load/paths")
        .and_then(Value::as_array)
    {
        for v in paths.iter().filter_map(Value::as_str) {
            let pb = PathBuf::from(v);
            if !out.contains(&pb) {
                out.push(pb);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal Node plugin in a fresh directory.
    fn plugin_dir() -> (tempfile::TempDir, PluginManifest) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("openclaw.plugin.json"),
            r#"{"id": "safe", "kind": "context-engine", "entry": "./index.js", "configSchema": {"type": "object"}}"#,
        )
        .expect("manifest");
        std::fs::write(dir.path().join("index.js"), "export default () => {};").expect("entry");
        let manifest = load_manifest(dir.path()).expect("manifest loads");
        (dir, manifest)
    }

    fn chmod(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn world_writable_plugin_paths_are_refused_with_the_fix() {
        let euid = nix::unistd::geteuid().as_raw();
        let (dir, manifest) = plugin_dir();
        check_plugin_paths(&manifest, euid).expect("a private directory is accepted");
        for (path, mode, restore) in [
            (dir.path().to_path_buf(), 0o777, 0o755),
            (dir.path().join("index.js"), 0o666, 0o644),
            (dir.path().join("openclaw.plugin.json"), 0o646, 0o644),
        ] {
            chmod(&path, mode);
            let err = check_plugin_paths(&manifest, euid)
                .expect_err("a world-writable path must be refused")
                .to_string();
            assert!(
                err.contains("world-writable")
                    && err.contains(&format!("chmod o-w {}", path.display())),
                "{}: {err}",
                path.display()
            );
            chmod(&path, restore);
        }
        check_plugin_paths(&manifest, euid).expect("accepted again once fixed");
    }

    #[test]
    fn plugin_paths_owned_by_another_user_are_refused() {
        let (dir, manifest) = plugin_dir();
        let me = nix::unistd::geteuid().as_raw();
        let (stranger, runner) = if me == 0 {
            // As root: hand the directory to another user, then check as root.
            let other = nix::unistd::Uid::from_raw(4242);
            nix::unistd::chown(dir.path(), Some(other), None).expect("chown as root");
            (4242, 0)
        } else {
            // As a user: the files are ours; check as if another user ran clawctx.
            (me, me + 1)
        };
        let err = check_plugin_paths(&manifest, runner)
            .expect_err("a directory owned by someone else must be refused")
            .to_string();
        assert!(
            err.contains(&format!(
                "owned by uid {stranger}, not by you (uid {runner})"
            )) && err.contains(&format!("chown {runner} ")),
            "{err}"
        );
    }

    #[test]
    fn root_owned_plugin_paths_are_accepted() {
        // System paths are root-owned and not world-writable everywhere.
        let (_dir, mut manifest) = plugin_dir();
        manifest.root = PathBuf::from("/usr");
        manifest.manifest_path = PathBuf::from("/etc/passwd");
        manifest.entry = crate::manifest::PluginEntry::Node(PathBuf::from("/bin/sh"));
        check_plugin_paths(&manifest, 4242).expect("root-owned plugins are accepted for any user");
    }

    #[test]
    fn install_refuses_a_world_writable_directory() {
        let (dir, _) = plugin_dir();
        let state = tempfile::tempdir().expect("state dir");
        chmod(dir.path(), 0o777);
        for link in [true, false] {
            let err = install_with(
                dir.path().to_str().expect("utf-8 path"),
                state.path(),
                &InstallOptions { link, force: false },
            )
            .expect_err("install must refuse")
            .to_string();
            assert!(err.contains("refusing to install plugin \"safe\""), "{err}");
        }
        chmod(dir.path(), 0o755);
        assert!(list_ids(state.path()).is_empty(), "nothing was recorded");
    }

    fn list_ids(state: &Path) -> Vec<String> {
        read_index(state)
            .map(|i| i.installs.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn npm_names() {
        assert_eq!(
            npm_package_name("@martian-engineering/lossless-claw"),
            "@martian-engineering/lossless-claw"
        );
        assert_eq!(npm_package_name("@a/b@1.2.3"), "@a/b");
        assert_eq!(npm_package_name("left-pad@1"), "left-pad");
    }

    #[test]
    fn config_changes_apply() {
        let mut cfg = serde_json::json!({"plugins": {"slots": {"contextEngine": "x"}}});
        apply_changes(
            &mut cfg,
            &[
                ConfigChange::Set {
                    path: p(&["plugins", "entries", "x", "enabled"]),
                    value: Value::Bool(true),
                },
                ConfigChange::AppendUnique {
                    path: p(&["plugins", "load", "paths"]),
                    value: "/a".into(),
                },
                ConfigChange::AppendUnique {
                    path: p(&["plugins", "load", "paths"]),
                    value: "/a".into(),
                },
            ],
        );
        assert_eq!(
            cfg.pointer("/plugins/entries/x/enabled"),
            Some(&Value::Bool(true))
        );
        assert_eq!(
            cfg.pointer("/plugins/load/paths")
                .and_then(Value::as_array)
                .map(Vec::len),
            Some(1)
        );
        ConfigChange::Remove {
            path: p(&["plugins", "entries", "x"]),
        }
        .apply(&mut cfg);
        assert!(cfg.pointer("/plugins/entries/x").is_none());
    }
}
