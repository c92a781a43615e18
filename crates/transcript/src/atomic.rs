//! Whole-file atomic writes: a temp file in the target's own directory, synced, then renamed.
//!
//! `sessions.json`, a new transcript's header and a forked child transcript must never be seen
//! half-written by a reader or left half-written by a crash. Writing a temp file next to the
//! target and renaming it over (or, for new files, linking it without clobbering) gives exactly
//! "old content or new content". The temp file lives in the same directory so the rename never
//! crosses a file system.

use std::io::Write;
use std::path::Path;

use crate::error::{Result, TranscriptError};

/// How the rename treats an existing target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replace {
    /// Replace the target if it exists (`sessions.json`).
    Overwrite,
    /// Fail with [`TranscriptError::AlreadyExists`] if the target exists (new transcripts).
    CreateNew,
}

/// Writes `bytes` to `path` atomically. Creates the parent directory if needed.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: Replace) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|e| TranscriptError::io(dir, e))?;
    if mode == Replace::CreateNew && path.exists() {
        return Err(TranscriptError::AlreadyExists {
            path: path.to_path_buf(),
        });
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".clawctx-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| TranscriptError::io(dir, e))?;
    // A failure names the target, not the temporary file (which is removed on return): on a
    // full disk "sessions.json: No space left on device" is what the user can act on.
    tmp.write_all(bytes)
        .map_err(|e| TranscriptError::io(path, e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| TranscriptError::io(path, e))?;
    match mode {
        Replace::Overwrite => {
            tmp.persist(path)
                .map_err(|e| TranscriptError::io(path, e.error))?;
        }
        Replace::CreateNew => {
            tmp.persist_noclobber(path).map_err(|e| {
                if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                    TranscriptError::AlreadyExists {
                        path: path.to_path_buf(),
                    }
                } else {
                    TranscriptError::io(path, e.error)
                }
            })?;
        }
    }
    sync_dir(dir);
    Ok(())
}

/// Makes the rename itself durable where the platform allows syncing a directory. Best effort:
/// the data is already safe in one of the two names, so a failure here is not an error.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_new_refuses_existing_and_overwrite_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/x.json");
        write_atomic(&p, b"one", Replace::CreateNew).unwrap();
        let err = write_atomic(&p, b"two", Replace::CreateNew).unwrap_err();
        assert!(matches!(err, TranscriptError::AlreadyExists { .. }));
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"three", Replace::Overwrite).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
        // No temp files left behind.
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
