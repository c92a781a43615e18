//! Which files an engine-API caller may name.
//!
//! The plugin protocol's params carry file locators (`sessionFile` in `bootstrap`, `maintain`,
//! `afterTurn` and `compact`, `runtimeContext.sessionFile`, `prepareSubagentSpawn`'s
//! `parentSessionFile` and `childSessionFile`). Inside a host they name the host's own
//! transcript; over HTTP they are whatever the caller writes, and an engine that reads them
//! (`lossless` imports the `bootstrap` file as a transcript, and `assemble` then hands its
//! messages back) would read any file the gateway's user can. So the gateway decides, before
//! the engine is called, what a call may name:
//!
//! - the session's own transcript: the file the gateway's session store holds for the call's
//!   session key, inside the state dir;
//! - a file under a directory the operator listed in `gateway.engineApi.transcriptRoots` (a host
//!   on the same machine whose transcripts the gateway may import);
//! - a marker, not a path: the call's own session key or id as a bare name (OpenClaw 2026.8+
//!   passes the session key as `sessionFile`; its transcripts are in SQLite). No engine of
//!   clawctx reads a relative name as a file;
//! - nothing (an empty value).
//!
//! A path is judged by where it really leads: symbolic links and `..` are resolved first, and
//! the verdict does not depend on whether the file exists (a refusal tells nothing about the
//! file). `bootstrap`, whose purpose is to read the file it names, is refused with 403
//! `path_not_allowed` naming the field, the path and why, before the engine is called. The
//! other calls only pass the locator on: a value they may not name is replaced before the
//! engine sees it (by the session key marker where the field is required, removed where it is
//! optional), so a host whose transcripts live elsewhere (clawctx with the bridge plugin,
//! another state dir) keeps working and no engine is handed a path the caller could not name.
//!
//! Directory hints (`runtimeContext.cwd`, `workspaceDir`, `storePath`) are passed on as they
//! are: no engine of clawctx reads a file through them.

use std::path::{Component, Path, PathBuf};

use clawctx_protocol::*;

use crate::api_error::ApiError;
use crate::state::Shared;

/// The file fields of one call, judged for the session `key`.
pub(crate) struct SessionFiles<'a> {
    shared: &'a Shared,
    key: &'a str,
    markers: Vec<&'a str>,
}

impl<'a> SessionFiles<'a> {
    /// For a call on session `key`; `markers` are the ids the call names (its session key and
    /// session id), the bare names a relative value may be.
    pub(crate) fn new(shared: &'a Shared, key: &'a str, markers: &[&'a str]) -> Self {
        SessionFiles {
            shared,
            key,
            markers: markers
                .iter()
                .copied()
                .chain(std::iter::once(key))
                .filter(|m| !m.trim().is_empty())
                .collect(),
        }
    }

    /// Refuses (403, naming `field`) a value the call may not name.
    pub(crate) fn require(&self, field: &str, value: &str) -> Result<(), ApiError> {
        match self.refusal(value) {
            None => Ok(()),
            Some(why) => Err(ApiError::path_not_allowed(
                field,
                format!("`{field}` {value:?} is refused: {why}"),
            )),
        }
    }

    /// A required locator the call may not name becomes the session key marker.
    pub(crate) fn keep_or_mark(&self, field: &str, value: &mut String) {
        if let Some(why) = self.refusal(value) {
            tracing::info!("engine API: `{field}` {value:?} is not passed to the engine: {why}");
            *value = self.key.to_owned();
        }
    }

    /// An optional locator the call may not name is removed.
    pub(crate) fn keep_or_drop(&self, field: &str, value: &mut Option<String>) {
        if let Some(why) = value.as_deref().and_then(|v| self.refusal(v)) {
            tracing::info!("engine API: `{field}` {value:?} is not passed to the engine: {why}");
            *value = None;
        }
    }

    /// `runtimeContext.sessionFile`, when there is one.
    pub(crate) fn context(&self, rc: &mut Option<ContextEngineRuntimeContext>) {
        if let Some(rc) = rc.as_mut() {
            self.keep_or_drop("runtimeContext.sessionFile", &mut rc.session_file);
        }
    }

    /// Why `value` may not be named, `None` when it may.
    fn refusal(&self, value: &str) -> Option<String> {
        if value.trim().is_empty() {
            return None;
        }
        if value.contains('\0') {
            return Some("a path cannot contain NUL".into());
        }
        let path = Path::new(value);
        if !path.is_absolute() {
            let bare = !value.contains(['/', '\\']) && value != "." && value != "..";
            if bare && self.markers.iter().any(|m| *m == value) {
                return None;
            }
            return Some(format!(
                "a relative value is only accepted as a marker, the call's own session key or id \
                 ({}); a transcript is named by its absolute path (the session's own in the state dir, or \
                 one under gateway.engineApi.transcriptRoots)",
                self.markers
                    .iter()
                    .map(|m| format!("{m:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let real = resolve(path);
        let own = self.own_transcript();
        if let Ok(own) = &own {
            if *own == real {
                return None;
            }
        }
        let roots = &self.shared.config.transcript_roots;
        if roots.iter().any(|r| real.starts_with(r)) {
            return None;
        }
        let leads = if real.as_path() == path {
            String::new()
        } else {
            format!(" (it leads to {})", real.display())
        };
        let own = match own {
            Ok(p) => format!("this session's transcript is {}", p.display()),
            Err(why) => why,
        };
        let roots = if roots.is_empty() {
            "none is configured".to_owned()
        } else {
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        Some(format!(
            "the engine API reads only the session's own transcript in the state dir or files under \
             gateway.engineApi.transcriptRoots{leads}; {own}; roots: {roots}"
        ))
    }

    /// The session's own transcript, resolved, when the gateway stores the session and the
    /// file is in the state dir; else why not.
    fn own_transcript(&self) -> Result<PathBuf, String> {
        let store = self.shared.runtime.store();
        let not_stored = || format!("the gateway stores no session {:?}", self.key);
        let entry = match store.get(self.key) {
            Ok(Some(e)) => e,
            Ok(None) | Err(_) => return Err(not_stored()),
        };
        let path = store
            .transcript_path(store.agent_id_for(self.key), &entry)
            .map_err(|_| not_stored())?;
        let real = resolve(&path);
        if !real.starts_with(resolve(self.shared.runtime.state_dir())) {
            return Err(format!(
                "this session's transcript {} is outside the state dir",
                path.display()
            ));
        }
        Ok(real)
    }
}

/// Where `path` (absolute) really leads: the file system's answer when it exists; else `..` and
/// `.` taken out by name and the deepest existing ancestor resolved, the rest kept.
fn resolve(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let mut plain = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                plain.pop();
            }
            other => plain.push(other),
        }
    }
    let mut base = plain.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(mut real) = std::fs::canonicalize(&base) {
            real.extend(rest.iter().rev());
            return real;
        }
        match base.file_name() {
            Some(name) => {
                rest.push(name.to_owned());
                base.pop();
            }
            None => return plain,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn paths_resolve_to_where_they_lead_whether_or_not_they_exist() {
        let dir = tempfile::tempdir().unwrap();
        let real_dir = std::fs::canonicalize(dir.path()).unwrap();
        let inside = real_dir.join("a");
        std::fs::create_dir(&inside).unwrap();
        assert_eq!(
            resolve(&dir.path().join("a/../a/./x.jsonl")),
            inside.join("x.jsonl")
        );
        assert_eq!(
            resolve(
                &dir.path()
                    .join("a/missing/../../../../../../../../../etc/passwd")
            ),
            resolve(Path::new("/etc/passwd"))
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", inside.join("link")).unwrap();
            assert_eq!(
                resolve(&inside.join("link/hostname-missing")),
                resolve(Path::new("/etc")).join("hostname-missing")
            );
        }
    }
}
