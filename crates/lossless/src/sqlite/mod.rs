//! The SQLite store and the threads that own it.
//!
//! SQLite must never block the async runtime, so one dedicated worker thread, the *store
//! thread*, owns the writing [`rusqlite::Connection`] and runs jobs sent over a channel; async
//! callers await a oneshot reply, blocking callers (the CLI) wait on it. Every write is one
//! transaction per job, so a batch is atomic and a crash leaves either all of it or none of
//! it. The exception is full-text indexing of new messages (large batches', and the move of
//! the in-memory index to the file's), which the thread runs between jobs in transactions of
//! their own; a crash in between leaves messages that the next connection indexes from their
//! text (see `pending_fts`).
//!
//! **Long reads run on a second thread.** A recall scan (a regex `lcm_grep` over a large
//! store, `lcm_describe`/`lcm_expand` of a large range), `doctor`, `status` and the dashboard's
//! views can take seconds; on the store thread they would hold up every session's assembly
//! and ingest queued behind them. [`LosslessStore::call_read`] runs such jobs on the *read
//! thread*, which owns a read-only connection of its own (WAL lets it read while the store
//! thread writes), each job in one read transaction. Invariant: a read job sees every message
//! the store acknowledged before the job was sent. An acknowledgement is sent only after its
//! transaction committed, and a read transaction begun later sees every commit; what the
//! store thread keeps in memory only concerns the *full-text index* of the newest messages
//! (its pending index and the large batches' terms waiting in `Db::deferred`), and those
//! messages are above the file's index boundary (`fts_state.upto`), so the read connection's
//! own pending index indexes them from their stored text before its first full-text query, as
//! any other connection does (`pending_fts::sync`). Assembly, which reads the store thread's
//! decoded-message cache and runs on every turn, stays on the store thread; the read thread's
//! caches start empty and never see a retention rewrite, which is why nothing there uses the
//! decoded cache. One read thread: long reads wait for each other, never for a turn.
//! (A long read transaction holds the log's checkpoints back while it runs; the store thread's
//! forced log restart, see `checkpoint`, may then wait up to the busy timeout for it.)
//!
//! **A panicking job costs only its caller.** Every job runs under `catch_unwind`: a panic
//! becomes [`LosslessError::Panicked`] (naming the job and the panic message) for that caller,
//! and before the next job the thread rolls back whatever transaction the job left open and
//! drops the state it may have left half-updated (`Db::recover_after_panic`): the decoded and
//! term-row caches, the shared-skeleton ids, the pending full-text index (its temporary tables
//! emptied, its bookkeeping reset) and the large batches' waiting terms. Nothing acknowledged
//! is lost or hidden by that: every message is in `messages`, and the ones indexed only in
//! memory are above the boundary, so the next full-text query indexes them from their text. When the connection cannot even be rolled back, it is replaced by a new one.
//! The work the store thread does between jobs is contained the same way.
//! (Containment needs panics to unwind, Rust's default; a build with `panic = "abort"` would
//! lose it.)

mod assemble;
mod backend;
mod checkpoint;
mod compaction;
mod db;
mod doctor;
pub mod encode_queue;
mod import;
mod inspect;
pub mod pending_fts;
mod prompt_recall;
mod recall;
mod retention;
pub mod schema;
mod search;
mod session;
pub mod term_rows;
pub mod unpack;
mod vectors;

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

pub use db::Db;
pub(crate) use db::{get_conv as db_get_conv, get_or_create_conv as db_get_or_create_conv};
#[cfg(any(test, feature = "internals"))]
pub use db::{DEFER_IDLE, DEFER_MAX, DEFER_ROWS};
pub use encode_queue::EncodeQueue;

use crate::error::{LosslessError, Result};

type Job = Box<dyn FnOnce(&mut Db) + Send>;

use crate::core::FxMap;

/// A handle to an open lossless store. Cheap to clone; the worker threads stop when the last
/// handle is dropped or [`LosslessStore::close`] is called.
#[derive(Clone)]
pub struct LosslessStore {
    inner: Arc<Inner>,
}

struct Inner {
    senders: Mutex<Senders>,
    /// Says when the worker has closed the connection (taken by the first waiter).
    closed: Mutex<Option<mpsc::Receiver<()>>>,
    path: PathBuf,
    /// One compaction at a time per conversation (see `Backend::lock_compaction`).
    compactions: Mutex<FxMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    /// Where each conversation's last assembly started (cache-stable front).
    fronts: Arc<crate::core::assemble::Fronts>,
}

/// Where jobs go: both `None` once closed.
struct Senders {
    /// The store thread.
    writer: Option<mpsc::Sender<Job>>,
    /// The read thread; `None` while open only when its connection could not be opened
    /// (reads then run on the store thread).
    reader: Option<mpsc::Sender<Job>>,
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
        Self::open_durable(path, busy_timeout_ms, crate::config::Durability::default())
    }

    /// [`Self::open_with`] with an explicit [`Durability`](crate::config::Durability) (the
    /// writing connection's `PRAGMA synchronous`).
    pub fn open_durable(
        path: impl AsRef<Path>,
        busy_timeout_ms: u64,
        durability: crate::config::Durability,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // A full or read-only disk says so here, naming the file, rather than as a bare
        // "unable to open database file".
        let conn = schema::open(&path, busy_timeout_ms).map_err(|e| e.on_file(&path))?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {};",
            durability.synchronous()
        ))
        .map_err(|e| LosslessError::from_sqlite(e, busy_timeout_ms).on_file(&path))?;
        let checkpointer = checkpoint::Checkpointer::spawn(&path, busy_timeout_ms);
        if checkpointer.is_some() {
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
                .map_err(|e| LosslessError::from_sqlite(e, busy_timeout_ms))?;
        }
        let mut db = Db::new(conn, &path, busy_timeout_ms, checkpointer);
        // The read thread's connection opens after the store thread's, which created and
        // migrated the file. Should it fail, reads run on the store thread as they used to.
        let reader = match schema::open_reader(&path, busy_timeout_ms) {
            Ok(conn) => {
                let rdb = Db::new_reader(conn, &path, busy_timeout_ms);
                let (tx, rx) = mpsc::channel::<Job>();
                let handle = std::thread::Builder::new()
                    .name("lossless-read".into())
                    .spawn(move || {
                        let mut rdb = rdb;
                        for job in rx {
                            job(&mut rdb);
                        }
                    })?;
                Some((tx, handle))
            }
            Err(e) => {
                tracing::warn!(
                    "lossless: cannot open a read connection ({e}); long reads run on the store thread"
                );
                None
            }
        };
        let (reader_tx, reader_thread) = reader.unzip();
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
                                contain(&mut db, "indexing waiting messages", |db| {
                                    db.index_deferred();
                                });
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
                    waiting =
                        contain(&mut db, "the work between jobs", Db::after_job).unwrap_or(false);
                }
                // The read connection closes first, so this one is the last and removes the
                // log when it closes.
                if let Some(h) = reader_thread {
                    let _ = h.join();
                }
                db.close();
                let _ = closed_tx.send(());
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                senders: Mutex::new(Senders {
                    writer: Some(tx),
                    reader: reader_tx,
                }),
                closed: Mutex::new(Some(closed_rx)),
                path,
                compactions: Mutex::new(FxMap::default()),
                fronts: Arc::default(),
            }),
        })
    }

    /// Where each conversation's last assembly started (see [`crate::core::assemble`]).
    pub(crate) fn fronts(&self) -> Arc<crate::core::assemble::Fronts> {
        self.inner.fronts.clone()
    }

    /// The compaction lock of conversation `conv_id` in this process.
    pub(crate) fn compaction_mutex(&self, conv_id: i64) -> Arc<tokio::sync::Mutex<()>> {
        let mut g = self
            .inner
            .compactions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        g.entry(conv_id).or_default().clone()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn send(&self, job: Job, read: bool) -> Result<()> {
        let guard = self
            .inner
            .senders
            .lock()
            .map_err(|_| LosslessError::Closed)?;
        let writer = guard.writer.as_ref().ok_or(LosslessError::Closed)?;
        let tx = match &guard.reader {
            Some(reader) if read => reader,
            _ => writer,
        };
        tx.send(job).map_err(|_| LosslessError::Closed)
    }

    /// Runs `f` on the store thread and awaits its result. A panic in `f` is
    /// [`LosslessError::Panicked`] for this caller only (see the module header).
    pub async fn call<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(
            Box::new(move |db| {
                let _ = tx.send(run_job(db, std::any::type_name::<F>(), f));
            }),
            false,
        )?;
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
        self.send(
            Box::new(move |db| {
                let _ = tx.send(run_job(db, std::any::type_name::<F>(), f));
            }),
            false,
        )?;
        rx.recv().map_err(|_| LosslessError::Closed)?
    }

    /// Runs the read-only `f` on the read thread, inside one read transaction, and awaits its
    /// result: for reads that may take long (recall scans, doctor, status, inspection), which
    /// must not hold up the turns queued on the store thread. `f` sees every message
    /// acknowledged before this call (see the module header). A panic in `f` is
    /// [`LosslessError::Panicked`] for this caller only.
    pub async fn call_read<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Db) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(
            Box::new(move |db| {
                let out = run_job(db, std::any::type_name::<F>(), |db| db.read(f));
                let _ = tx.send(out);
            }),
            true,
        )?;
        rx.await.map_err(|_| LosslessError::Closed)?
    }

    /// [`Self::call_read`] for synchronous callers (never call this from an async task).
    pub fn call_read_blocking<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Db) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        self.send(
            Box::new(move |db| {
                let out = run_job(db, std::any::type_name::<F>(), |db| db.read(f));
                let _ = tx.send(out);
            }),
            true,
        )?;
        rx.recv().map_err(|_| LosslessError::Closed)?
    }

    /// Stops the workers after the queued jobs (the connection is closed cleanly: the newest
    /// messages' index moved to the file, the log checkpointed); returns at once.
    pub fn close(&self) {
        if let Ok(mut g) = self.inner.senders.lock() {
            g.writer.take();
            g.reader.take();
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

/// Runs job `f` (named `job`, a closure's type name) with a panic contained: the panic becomes
/// [`LosslessError::Panicked`] and the connection and caches are recovered before the thread
/// takes its next job.
fn run_job<R>(db: &mut Db, job: &'static str, f: impl FnOnce(&mut Db) -> Result<R>) -> Result<R> {
    // Unwind safety: what `f` may leave half-done is the connection's transaction and `Db`'s
    // in-memory state, and `recover_after_panic` resets both; what `f` captured is dropped.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(db))) {
        // A full or read-only disk is named with the file (see `LosslessError::on_file`).
        Ok(out) => out.map_err(|e| e.on_file(db.path())),
        Err(payload) => {
            let job = job_name(job);
            let message = panic_message(payload.as_ref());
            tracing::error!("lossless: store job {job} panicked: {message}; rolled back, the store keeps serving");
            db.recover_after_panic();
            Err(LosslessError::Panicked { job, message })
        }
    }
}

/// Runs the store thread's own work `f` (between jobs) with a panic contained: logged, the
/// connection and caches recovered; `None` then.
fn contain<R>(db: &mut Db, what: &str, f: impl FnOnce(&mut Db) -> R) -> Option<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(db))) {
        Ok(out) => Some(out),
        Err(payload) => {
            tracing::error!(
                "lossless: {what} panicked: {}; rolled back, the store keeps serving",
                panic_message(payload.as_ref())
            );
            db.recover_after_panic();
            None
        }
    }
}

/// The text a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}

/// A readable name for a job from its closure's type name (diagnostics only: the format of
/// type names is not guaranteed): the path of the function that made the closure, without
/// `{{closure}}` and `<impl ...>` segments, e.g. `clawctx_lossless::api::grep`.
fn job_name(type_name: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let (mut depth, mut from) = (0usize, 0usize);
    let bytes = type_name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                parts.push(&type_name[from..i]);
                from = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&type_name[from..]);
    let kept: Vec<&str> = parts
        .into_iter()
        .filter(|p| !p.is_empty() && !p.starts_with('<') && !p.starts_with("{{"))
        .collect();
    if kept.is_empty() {
        type_name.to_owned()
    } else {
        kept.join("::")
    }
}

#[cfg(test)]
mod tests {
    use super::job_name;

    #[test]
    fn job_names_are_the_function_that_made_the_closure() {
        assert_eq!(
            job_name("clawctx_lossless::api::<impl clawctx_lossless::store::LosslessStore>::grep::{{closure}}"),
            "clawctx_lossless::api::grep"
        );
        assert_eq!(
            job_name("clawctx_lossless::engine::<impl clawctx_engine::engine::ContextEngine for clawctx_lossless::engine::LosslessEngine>::assemble::{{closure}}::{{closure}}"),
            "clawctx_lossless::engine::assemble"
        );
        assert_eq!(job_name("store::a_test::{{closure}}"), "store::a_test");
        assert_eq!(job_name("{{closure}}"), "{{closure}}");
    }
}
