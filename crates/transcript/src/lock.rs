//! The session write lock (contract §10: `session.writeLock`).
//!
//! Two processes must never append to one transcript at the same time, or their lines could
//! interleave and their `parentId`s fork the tree behind each other's back. The lock is an OS
//! advisory whole-file lock (`flock` on Unix, `LockFileEx` on Windows, through `fs4`) taken on
//! the file itself, so it needs no lock files on disk and is released by the kernel when the
//! holder dies: OpenClaw's `staleMs` problem does not arise. Waiting is bounded
//! (`acquireTimeoutMs`, default 60 s) and a timeout is a clear [`TranscriptError::LockTimeout`].
//!
//! `flock` locks belong to an open file description, so two handles in one process exclude
//! each other too; that is what makes the lock testable in-process.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fs4::fs_std::FileExt;

use crate::error::{Result, TranscriptError};

/// OpenClaw's default `session.writeLock.acquireTimeoutMs`.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_millis(60_000);

/// How long to sleep between attempts while another process holds the lock.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// An exclusive write lock on one file, released on drop.
///
/// The guard also owns the handle it locked, opened for reading and appending, so the holder
/// writes through the very handle that holds the lock.
#[derive(Debug)]
pub struct WriteLock {
    file: File,
    path: PathBuf,
}

impl WriteLock {
    /// Opens `path` (which must exist) and takes its exclusive lock, waiting at most `timeout`.
    pub fn acquire(path: &Path, timeout: Duration) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| TranscriptError::io(path, e))?;
        Self::acquire_on(file, path, timeout)
    }

    /// Takes the exclusive lock on an already open handle, waiting at most `timeout`.
    pub fn acquire_on(file: File, path: &Path, timeout: Duration) -> Result<Self> {
        let start = Instant::now();
        loop {
            let got =
                FileExt::try_lock_exclusive(&file).map_err(|e| TranscriptError::io(path, e))?;
            if got {
                return Ok(WriteLock {
                    file,
                    path: path.to_path_buf(),
                });
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(TranscriptError::LockTimeout {
                    path: path.to_path_buf(),
                    waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            std::thread::sleep(POLL_INTERVAL.min(timeout.saturating_sub(waited)));
        }
    }

    /// The locked handle (read + append).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The locked file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        // Closing the handle releases the lock anyway; unlocking first just makes it prompt
        // even if the handle were leaked. A failure here has no useful recovery.
        let _ = FileExt::unlock(&self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_locker_times_out_then_succeeds_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, b"").unwrap();
        let first = WriteLock::acquire(&path, Duration::from_millis(100)).unwrap();
        let err = WriteLock::acquire(&path, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, TranscriptError::LockTimeout { .. }), "{err}");
        assert!(err.to_string().contains("session write lock"), "{err}");
        drop(first);
        WriteLock::acquire(&path, Duration::from_millis(50)).unwrap();
    }
}
