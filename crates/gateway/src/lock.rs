//! One gateway per state dir: an advisory lock on `<state>/runtime/gateway.lock`.
//!
//! Two gateways on one state dir would each keep their own prepared histories, outboxes and
//! maintenance lanes over the same transcripts and stores, and a turn on one would not be seen
//! by the other. The lock is an OS advisory lock (`flock` through `fs4`), so it is released
//! when the process dies however it dies: a crashed gateway never leaves a stale lock behind,
//! only a file whose contents say who held it last. The file records the holder's pid and
//! address (JSON), which is what `clawctx gateway status` and the second gateway's refusal show.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

/// Where the lock lives inside a state dir.
pub fn lock_path(state_dir: &Path) -> PathBuf {
    state_dir.join("runtime").join("gateway.lock")
}

/// What the lock file says about its holder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockInfo {
    /// Process id.
    pub pid: u32,
    /// `http://host:port`, once the gateway listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When it started (epoch ms).
    #[serde(default)]
    pub started_at: u64,
    /// clawctx version.
    #[serde(default)]
    pub version: String,
}

/// The held lock. Dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct StateLock {
    file: File,
    path: PathBuf,
    info: LockInfo,
}

impl StateLock {
    /// Takes the state dir's gateway lock, or fails with [`GatewayError::Locked`] naming the
    /// holder's pid and address.
    pub fn acquire(state_dir: &Path) -> Result<Self> {
        let path = lock_path(state_dir);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| GatewayError::io(dir, e))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| GatewayError::io(&path, e))?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(true) => {}
            Ok(false) => {
                let holder = read_info(&path);
                return Err(GatewayError::Locked {
                    state_dir: state_dir.to_path_buf(),
                    pid: holder.as_ref().map(|h| h.pid),
                    url: holder.and_then(|h| h.url),
                });
            }
            Err(e) => return Err(GatewayError::io(&path, e)),
        }
        let info = LockInfo {
            pid: std::process::id(),
            url: None,
            started_at: now_ms(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let mut lock = StateLock { file, path, info };
        lock.write()?;
        Ok(lock)
    }

    /// Records the address the gateway listens on.
    pub fn set_url(&mut self, url: impl Into<String>) -> Result<()> {
        self.info.url = Some(url.into());
        self.write()
    }

    /// What the file says.
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    fn write(&mut self) -> Result<()> {
        let text = serde_json::to_string(&self.info).unwrap_or_default();
        let f = &mut self.file;
        f.set_len(0)
            .and_then(|()| f.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| f.write_all(text.as_bytes()))
            .and_then(|()| f.sync_data())
            .map_err(|e| GatewayError::io(&self.path, e))
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        // The contents are cleared (the file stays: deleting it could let a third process lock
        // a fresh file while a second one waits on the old inode); closing releases the lock.
        let _ = self.file.set_len(0);
        let _ = FileExt::unlock(&self.file);
    }
}

/// Whether a gateway holds the state dir's lock, and what its lock file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// No gateway holds it.
    Free,
    /// A gateway holds it.
    Held(Option<LockInfo>),
}

/// Looks at the lock without keeping it (a shared lock taken and dropped at once).
pub fn probe(state_dir: &Path) -> Result<LockState> {
    let path = lock_path(state_dir);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LockState::Free),
        Err(e) => return Err(GatewayError::io(&path, e)),
    };
    match FileExt::try_lock_shared(&file) {
        Ok(true) => {
            let _ = FileExt::unlock(&file);
            Ok(LockState::Free)
        }
        Ok(false) => Ok(LockState::Held(read_info(&path))),
        Err(e) => Err(GatewayError::io(&path, e)),
    }
}

fn read_info(path: &Path) -> Option<LockInfo> {
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_second_lock_on_one_state_dir_is_refused_with_the_holders_pid_and_url() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(probe(dir.path()).unwrap(), LockState::Free);
        let mut first = StateLock::acquire(dir.path()).unwrap();
        first.set_url("http://127.0.0.1:4242").unwrap();
        let err = StateLock::acquire(dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id()))
                && text.contains("http://127.0.0.1:4242"),
            "{text}"
        );
        match probe(dir.path()).unwrap() {
            LockState::Held(Some(info)) => {
                assert_eq!(info.url.as_deref(), Some("http://127.0.0.1:4242"))
            }
            other => panic!("expected held, got {other:?}"),
        }
        drop(first);
        assert_eq!(probe(dir.path()).unwrap(), LockState::Free);
        let _again = StateLock::acquire(dir.path()).unwrap();
    }
}
