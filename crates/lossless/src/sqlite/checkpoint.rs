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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Estimated log bytes between background checkpoints.
const CHECKPOINT_EVERY_BYTES: u64 = 4 << 20;
/// Every this many background checkpoints, one that restarts the log (see the loop).
const RESTART_EVERY: u32 = 4;
/// Estimated log bytes without a completed restart after which the store thread restarts the
/// log itself (the checkpoint thread is starved, e.g. on a saturated machine): the bound.
const FORCE_RESTART_BYTES: u64 = 32 << 20;
/// What a commit adds to the log besides its text: the pages it touches (the message and
/// frontier leaves, index pages, full-text segments, the conversation row), each written
/// whole. A turn commits a few small messages, so this, not the text, is most of the log.
const PAGES_PER_COMMIT_BYTES: u64 = 12 * 4096;

/// The store thread's side: counts what it wrote and wakes the checkpoint thread.
pub(crate) struct Checkpointer {
    wake: mpsc::SyncSender<()>,
    pending: u64,
    /// Log restarts the thread has completed (it counts, the store thread reads).
    restarts: Arc<AtomicU64>,
    /// The count last seen, and the estimated log bytes since then.
    seen_restarts: u64,
    since_restart: u64,
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
        conn.busy_timeout(Duration::from_millis(busy_timeout_ms))
            .ok()?;
        // One wake-up may wait while a checkpoint runs; more would be redundant.
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        let restarts = Arc::new(AtomicU64::new(0));
        let counted = restarts.clone();
        let thread = std::thread::Builder::new()
            .name("lossless-checkpoint".into())
            .spawn(move || {
                let mut n = 0u32;
                for () in rx {
                    // PASSIVE copies what it can without ever waiting. Under a steady stream
                    // of commits it never quite catches up with the writer, and the log only
                    // starts over once a checkpoint has copied every frame: so every few
                    // rounds, right after a PASSIVE one has done the bulk, a RESTART copies the
                    // rest, holding the writer back for that remainder only. A failed or
                    // partial checkpoint is retried on the next wake-up; the log only grows
                    // meanwhile, nothing is lost.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    n += 1;
                    if n % RESTART_EVERY == 0 {
                        // (busy, log frames, checkpointed frames): busy 0 = it completed.
                        let done = conn
                            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0))
                            .is_ok_and(|busy| busy == 0);
                        if done {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                let _ = conn.close();
            })
            .ok()?;
        Some(Self {
            wake,
            pending: 0,
            restarts,
            seen_restarts: 0,
            since_restart: 0,
            thread,
        })
    }

    /// Records a committed write transaction (its pages, see [`PAGES_PER_COMMIT_BYTES`]).
    /// Returns true when the store thread must restart the log itself: the checkpoint thread
    /// has not completed a restart for [`FORCE_RESTART_BYTES`] of log.
    pub(crate) fn committed(&mut self) -> bool {
        self.wrote(PAGES_PER_COMMIT_BYTES);
        let restarts = self.restarts.load(Ordering::Relaxed);
        if restarts != self.seen_restarts {
            self.seen_restarts = restarts;
            self.since_restart = 0;
        }
        self.since_restart += PAGES_PER_COMMIT_BYTES;
        if self.since_restart >= FORCE_RESTART_BYTES {
            self.since_restart = 0;
            return true;
        }
        false
    }

    /// Records `bytes` of text toward the restart bound too (see [`Self::committed`]).
    fn count_toward_restart(&mut self, bytes: u64) {
        self.since_restart += bytes;
    }

    /// Stops the thread after its current checkpoint and closes its connection.
    pub(crate) fn stop(self) {
        drop(self.wake);
        let _ = self.thread.join();
    }

    /// Records `bytes` of text written by a committed transaction; wakes the thread once the
    /// estimated log growth passes the threshold.
    pub(crate) fn wrote(&mut self, bytes: u64) {
        self.pending += bytes;
        self.count_toward_restart(bytes);
        if self.pending >= CHECKPOINT_EVERY_BYTES {
            self.pending = 0;
            // Full channel: a wake-up is already queued, which covers this one too.
            let _ = self.wake.try_send(());
        }
    }
}
