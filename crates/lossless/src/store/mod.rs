//! The SQLite store and the thread that owns it.
//!
//! SQLite must never block the async runtime, so one dedicated worker thread owns the
//! [`rusqlite::Connection`] and runs jobs sent over a channel; async callers await a oneshot
//! reply, blocking callers (the CLI) wait on it. Every write is one transaction per job, so a
//! batch is atomic and a crash leaves either all of it or none of it. The exception is
//! full-text indexing of new messages (large batches', and the move of the in-memory index to
//! the file's), which the thread runs between jobs in transactions of their own; a crash in
//! between leaves messages that the next connection indexes from their text (see
//! `pending_fts`).

mod checkpoint;
pub mod codec;
mod db;
pub mod decoded;
pub mod encode_queue;
pub mod pack;
pub mod pending_fts;
pub mod schema;
pub mod term_rows;
pub mod terms;

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

pub(crate) use db::{get_conv as db_get_conv, get_or_create_conv as db_get_or_create_conv, now_ms};
pub use db::{
    ConvKey, ConvRow, Db, IngestOutcome, TurnCommit, DEFAULT_LARGE_PAYLOAD_BYTES, DEFER_IDLE,
    DEFER_MAX, DEFER_ROWS,
};
pub use encode_queue::EncodeQueue;

use crate::error::{LosslessError, Result};

type Job = Box<dyn FnOnce(&mut Db) + Send>;

/// A hash map with the fast, non-randomized FxHash: the store's caches are keyed by ids and
/// strings the store itself produced.
pub(crate) type FxMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;

/// A handle to an open lossless store. Cheap to clone; the worker thread stops when the last
/// handle is dropped or [`LosslessStore::close`] is called.
#[derive(Clone)]
pub struct LosslessStore {
    inner: Arc<Inner>,
}

struct Inner {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// Says when the worker has closed the connection (taken by the first waiter).
    closed: Mutex<Option<mpsc::Receiver<()>>>,
    path: PathBuf,
}

impl std::fmt::Debug for LosslessStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LosslessStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// Default SQLite busy timeout of [`LosslessStore::open`].
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

impl LosslessStore {
    /// Opens (creating when absent) the store at `path`. Refuses foreign or corrupt files
    /// without modifying them. Blocking: call from a blocking context.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, DEFAULT_BUSY_TIMEOUT_MS)
    }

    /// [`Self::open`] with an explicit busy timeout.
    pub fn open_with(path: impl AsRef<Path>, busy_timeout_ms: u64) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = schema::open(&path, busy_timeout_ms)?;
        let checkpointer = checkpoint::Checkpointer::spawn(&path, busy_timeout_ms);
        if checkpointer.is_some() {
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
                .map_err(|e| LosslessError::from_sqlite(e, busy_timeout_ms))?;
        }
        let mut db = Db::new(conn, busy_timeout_ms, checkpointer);
        let (tx, rx) = mpsc::channel::<Job>();
        let (closed_tx, closed_rx) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("lossless-sqlite".into())
            .spawn(move || {
                // Between jobs, after each job's caller has its answer, messages of large
                // batches are indexed (see `Db::index_deferred`).
                let mut waiting = false;
                loop {
                    let job = if waiting {
                        match rx.recv_timeout(db::DEFER_IDLE) {
                            Ok(job) => job,
                            Err(mpsc::RecvTimeoutError::Timeout) => {
                                db.index_deferred();
                                waiting = false;
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        match rx.recv() {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    };
                    job(&mut db);
                    waiting = db.after_job();
                }
                db.close();
                let _ = closed_tx.send(());
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
                closed: Mutex::new(Some(closed_rx)),
                path,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn send(&self, job: Job) -> Result<()> {
        let guard = self.inner.tx.lock().map_err(|_| LosslessError::Closed)?;
        let tx = guard.as_ref().ok_or(LosslessError::Closed)?;
        tx.send(job).map_err(|_| LosslessError::Closed)
    }

    /// Runs `f` on the store thread and awaits its result.
    pub async fn call<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Box::new(move |db| {
            let _ = tx.send(f(db));
        }))?;
        rx.await.map_err(|_| LosslessError::Closed)?
    }

    /// Runs `f` on the store thread and blocks until it returns (for synchronous callers such
    /// as the CLI; never call this from an async task).
    pub fn call_blocking<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        self.send(Box::new(move |db| {
            let _ = tx.send(f(db));
        }))?;
        rx.recv().map_err(|_| LosslessError::Closed)?
    }

    /// Stops the worker after the queued jobs (the connection is closed cleanly: the newest
    /// messages' index moved to the file, the log checkpointed); returns at once.
    pub fn close(&self) {
        if let Ok(mut g) = self.inner.tx.lock() {
            g.take();
        }
    }

    /// [`Self::close`], then waits until the connection is closed (for a process about to
    /// exit; never call this from an async task, see [`Self::close_wait`]). Returns at once
    /// when another caller already waited.
    pub fn close_blocking(&self) {
        self.close();
        let rx = self.inner.closed.lock().ok().and_then(|mut g| g.take());
        if let Some(rx) = rx {
            let _ = rx.recv();
        }
    }

    /// [`Self::close_blocking`] for async callers (waits on a blocking thread).
    pub async fn close_wait(&self) {
        let this = self.clone();
        let _ = tokio::task::spawn_blocking(move || this.close_blocking()).await;
    }
}
