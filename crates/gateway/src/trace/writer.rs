//! The trace's writer: one thread that owns the trace file's connection, fed through a bounded
//! channel, and the handle ([`Tracer`]) the gateway, `clawctx run` and `clawctx chat` hold.
//!
//! Writing never fails or slows a turn: [`Tracer::write`] hands a finished trace to the thread
//! without blocking (a full queue drops it, counted); errors are logged and counted, never
//! returned to the turn. Reads for the API go through the same thread, after the writes queued
//! before them. The process-wide summarizer observer is sampled into a ring here, so a trace
//! can take the summarizer calls made during its turn.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::Serialize;

use super::{store, SummarizerTrace, TraceError, TraceSettings, TurnTrace};

/// Traces waiting for the writer at most; more are dropped (and counted).
const QUEUE: usize = 1024;
/// Summarizer calls remembered for the traces of running turns.
const SUMMARY_RING: usize = 256;

/// Counters of the writer, for logs and the API.
#[derive(Debug, Default)]
pub struct TraceCounters {
    /// Traces written.
    pub written: AtomicU64,
    /// Traces that failed to write (logged).
    pub failed: AtomicU64,
    /// Traces dropped because the writer was behind or gone.
    pub dropped: AtomicU64,
}

/// The counters as numbers.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TraceStats {
    /// Traces written by this process.
    pub written: u64,
    /// Traces that failed to write.
    pub failed: u64,
    /// Traces dropped (writer behind or gone).
    pub dropped: u64,
}

type ReadJob = Box<dyn FnOnce(Result<&store::TraceDb, &TraceError>) + Send>;

enum Job {
    Write(Box<TurnTrace>),
    Read(ReadJob),
}

/// A summarizer call seen by the process-wide observer.
#[derive(Clone, Debug)]
struct SummaryCallSeen {
    at: std::time::Instant,
    summarizer: &'static str,
    ok: bool,
    took: std::time::Duration,
}

/// The gateway's handle on its trace: the writer thread's queue, counters and the summarizer
/// ring. Cheap to clone.
#[derive(Clone)]
pub struct Tracer {
    tx: Option<std::sync::mpsc::SyncSender<Job>>,
    counters: Arc<TraceCounters>,
    summaries: Arc<Mutex<VecDeque<SummaryCallSeen>>>,
    _observer: Option<Arc<clawctx_summarize::observe::ObserverGuard>>,
    path: PathBuf,
}

impl Tracer {
    /// Starts the writer on `path` (created with its directory when missing). A file that
    /// cannot be opened is logged; the tracer then answers reads with the error and counts
    /// writes as failed.
    pub fn start(path: PathBuf, settings: TraceSettings) -> Tracer {
        let counters = Arc::new(TraceCounters::default());
        let summaries: Arc<Mutex<VecDeque<SummaryCallSeen>>> = Arc::default();
        if !settings.enabled {
            return Tracer {
                tx: None,
                counters,
                summaries,
                _observer: None,
                path,
            };
        }
        let ring = summaries.clone();
        let observer = clawctx_summarize::observe::add_observer(move |c| {
            if let Ok(mut r) = ring.lock() {
                if r.len() >= SUMMARY_RING {
                    r.pop_front();
                }
                r.push_back(SummaryCallSeen {
                    at: std::time::Instant::now(),
                    summarizer: c.summarizer,
                    ok: c.ok,
                    took: c.took,
                });
            }
        });
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUE);
        let c = counters.clone();
        let p = path.clone();
        let spawned = std::thread::Builder::new()
            .name("clawctx-trace".into())
            .spawn(move || writer(p, settings, rx, c));
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!("the turn trace writer did not start: {e}; turns are not traced");
                None
            }
        };
        Tracer {
            tx,
            counters,
            summaries,
            _observer: Some(Arc::new(observer)),
            path,
        }
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether traces are recorded.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Queues `trace` for writing; never blocks. A full queue or a stopped writer drops it
    /// (counted).
    pub fn write(&self, trace: TurnTrace) {
        let Some(tx) = &self.tx else {
            return;
        };
        if tx.try_send(Job::Write(Box::new(trace))).is_err() {
            let n = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "turn traces dropped: the trace writer is behind"
                );
            }
        }
    }

    /// Runs `f` on the writer thread over the connection (after the writes queued before it).
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&store::TraceDb) -> Result<T, TraceError> + Send + 'static,
    ) -> Result<T, TraceError> {
        let Some(tx) = &self.tx else {
            return Err(TraceError::Unavailable(
                "tracing is disabled (gateway.trace.enabled: false)".into(),
            ));
        };
        let (done, answer) = tokio::sync::oneshot::channel();
        let job: ReadJob = Box::new(move |db| {
            let _ = done.send(match db {
                Ok(db) => f(db),
                Err(e) => Err(TraceError::Unavailable(e.to_string())),
            });
        });
        // A blocking send off the async workers: the queue may be full of writes.
        let tx = tx.clone();
        tokio::task::spawn_blocking(move || tx.send(Job::Read(job)))
            .await
            .map_err(|e| TraceError::Unavailable(e.to_string()))?
            .map_err(|_| TraceError::Unavailable("the trace writer stopped".into()))?;
        answer
            .await
            .map_err(|_| TraceError::Unavailable("the trace writer stopped".into()))?
    }

    /// Waits until the traces queued before this call are written (shutdown).
    pub async fn flush(&self) {
        if self.tx.is_some() {
            let _ = self.read(|_| Ok(())).await;
        }
    }

    /// The writer's counters.
    pub fn stats(&self) -> TraceStats {
        TraceStats {
            written: self.counters.written.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
        }
    }

    /// Summarizer calls seen since `since`, per summarizer.
    pub(crate) fn summaries_since(&self, since: std::time::Instant) -> Vec<SummarizerTrace> {
        let Ok(ring) = self.summaries.lock() else {
            return Vec::new();
        };
        let mut out: Vec<SummarizerTrace> = Vec::new();
        for c in ring.iter().filter(|c| c.at >= since) {
            let i = match out.iter().position(|s| s.summarizer == c.summarizer) {
                Some(i) => i,
                None => {
                    out.push(SummarizerTrace {
                        summarizer: c.summarizer.to_owned(),
                        ..Default::default()
                    });
                    out.len() - 1
                }
            };
            let s = &mut out[i];
            if c.ok {
                s.ok += 1;
            } else {
                s.failed += 1;
            }
            s.ms += c.took.as_secs_f64() * 1000.0;
        }
        out
    }
}

/// The writer thread: the connection's one owner.
fn writer(
    path: PathBuf,
    settings: TraceSettings,
    rx: std::sync::mpsc::Receiver<Job>,
    counters: Arc<TraceCounters>,
) {
    let mut db = store::TraceDb::open(&path, settings);
    if let Err(e) = &db {
        tracing::warn!("{e}; turns are not traced");
    }
    while let Ok(job) = rx.recv() {
        match job {
            Job::Write(t) => {
                let result = match &mut db {
                    Ok(db) => db.insert(&t).map(|_| ()),
                    Err(e) => Err(TraceError::Unavailable(e.to_string())),
                };
                match result {
                    Ok(()) => {
                        counters.written.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        let n = counters.failed.fetch_add(1, Ordering::Relaxed) + 1;
                        if n.is_power_of_two() {
                            tracing::warn!(failed = n, "a turn trace was not written: {e}");
                        }
                    }
                }
            }
            Job::Read(f) => f(db.as_ref()),
        }
    }
    // Failed opens are retried by no one: the next gateway start tries again.
    drop(db);
}
