//! WAL checkpoints off the store thread.
//!
//! In WAL mode every page is written twice: once to the log at commit, once more into the
//! database file when the log is checkpointed. SQLite's automatic checkpoint runs inside the
//! commit that crosses the threshold, on the writer's thread, and measured at about half of
//! the store thread's ingest time. So the store's connection turns automatic checkpoints off
//! and this thread, with a connection of its own, runs `PASSIVE` checkpoints (which never
//! block the writer or readers) whenever enough has been written since the last one. The log
//! wraps around once a checkpoint has caught up, so it stays bounded without the writer ever
//! waiting for it.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Bytes written (message and summary text, roughly what reaches the log) between checkpoints.
const CHECKPOINT_EVERY_BYTES: u64 = 4 << 20;

/// The store thread's side: counts what it wrote and wakes the checkpoint thread.
pub(crate) struct Checkpointer {
    wake: mpsc::SyncSender<()>,
    pending: u64,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Opens a second connection to `path` and starts the checkpoint thread. `None` when that
    /// fails; the caller then keeps SQLite's automatic checkpoints.
    pub(crate) fn spawn(path: &Path, busy_timeout_ms: u64) -> Option<Self> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()?;
        conn.busy_timeout(Duration::from_millis(busy_timeout_ms)).ok()?;
        // One wake-up may wait while a checkpoint runs; more would be redundant.
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("lossless-checkpoint".into())
            .spawn(move || {
                for () in rx {
                    // A failed or partial checkpoint is retried on the next wake-up; the log
                    // only grows meanwhile, nothing is lost.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                }
                let _ = conn.close();
            })
            .ok()?;
        Some(Self {
            wake,
            pending: 0,
            thread,
        })
    }

    /// Stops the thread after its current checkpoint and closes its connection.
    pub(crate) fn stop(self) {
        drop(self.wake);
        let _ = self.thread.join();
    }

    /// Records `bytes` written by a committed transaction; wakes the thread past the threshold.
    pub(crate) fn wrote(&mut self, bytes: u64) {
        self.pending += bytes;
        if self.pending >= CHECKPOINT_EVERY_BYTES {
            self.pending = 0;
            // Full channel: a wake-up is already queued, which covers this one too.
            let _ = self.wake.try_send(());
        }
    }
}
