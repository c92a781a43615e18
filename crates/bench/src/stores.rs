//! `clawctx bench stores`: the lossless store on each backend, side by side, on the same
//! workload and at the same sizes.
//!
//! For each backend and size N: a fresh store (a temporary SQLite file, or a fresh database
//! created on the given PostgreSQL server and dropped afterwards) is filled with N messages of
//! one conversation by batched ingest (per-message cost), then a run of per-turn ingests (one
//! turn's 2–4 messages per call, latency each), assemblies (a new prompt over the stored
//! conversation, with prompt recall, latency each) and `lcm_grep` full-text searches (latency
//! each) follows, and the store's size is read against the raw text it holds. The calls go
//! through the storage boundary ([`clawctx_lossless::Backend`]), which is what the engine
//! calls: the figures are the store's, without a host around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_lossless::pg::connect::PgTarget;
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::{
    AssembleRequest, Backend, BackendKind, ConvKey, Durability, GrepQuery, LosslessConfig,
    LosslessStore, Scope,
};
use clawctx_protocol::AgentMessage;

use crate::error::{BenchError, Result};
use crate::stats::Latency;
use crate::workload::{Workload, WorkloadKind, WorkloadSpec};

/// What to measure.
#[derive(Clone, Debug)]
pub struct StoreBenchOptions {
    /// Backends, in the table's order.
    pub backends: Vec<BackendKind>,
    /// Store sizes (messages).
    pub sizes: Vec<u64>,
    /// The PostgreSQL server (a database on it is created per run and dropped).
    pub pg_url: Option<String>,
    /// Workload shape.
    pub kind: WorkloadKind,
    /// Seed.
    pub seed: u64,
    /// Per-turn ingests measured.
    pub turns: usize,
    /// Assemblies measured.
    pub assembles: usize,
    /// Searches measured.
    pub greps: usize,
    /// Token budget of each assembly.
    pub budget: u64,
    /// The SQLite store's `durability`.
    pub durability: Durability,
    /// With semantic recall: the model embeds the store after the batched ingest (its rate is
    /// reported), runs in the background during the per-turn ingests, and each assembly embeds
    /// its prompt and fuses the vector hits, as the engine's `assemble` does.
    pub embedder: Option<Arc<dyn clawctx_embed::Embedder>>,
    /// With `embedder`: the store's vectors are pseudo-random unit vectors stored under the
    /// model's identity ([`SyntheticVectors`]) instead of the model's, so a store of 100,000
    /// messages gets its vectors in seconds rather than hours; the prompts are still embedded
    /// by the model, and the search scans as many vectors as it would. Latency only: the hits
    /// mean nothing.
    pub synthetic_vectors: bool,
}

impl Default for StoreBenchOptions {
    fn default() -> Self {
        Self {
            backends: vec![BackendKind::Sqlite, BackendKind::Postgres],
            sizes: vec![10_000, 100_000],
            pg_url: None,
            kind: WorkloadKind::Mixed,
            seed: 1,
            turns: 300,
            assembles: 200,
            greps: 100,
            budget: 32_000,
            durability: Durability::Normal,
            embedder: None,
            synthetic_vectors: false,
        }
    }
}

/// Vectors for [`StoreBenchOptions::synthetic_vectors`]: unit vectors drawn from a hash of each
/// text, under another model's identity and length.
#[derive(Debug)]
pub struct SyntheticVectors {
    /// The identity of the model they stand in for.
    pub model_id: String,
    /// Its vectors' length.
    pub dim: usize,
}

#[async_trait::async_trait]
impl clawctx_embed::Embedder for SyntheticVectors {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    async fn embed(
        &self,
        texts: &[String],
    ) -> std::result::Result<Vec<Vec<f32>>, clawctx_embed::EmbedError> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hasher = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        Ok(texts
            .iter()
            .map(|text| {
                let mut seed = hasher.hash_one(text) | 1;
                let mut v: Vec<f32> = (0..self.dim)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                    })
                    .collect();
                clawctx_embed::l2_normalize(&mut v);
                v
            })
            .collect())
    }
}

/// One backend at one size.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreBenchRow {
    /// `sqlite` or `postgres`.
    pub backend: BackendKind,
    /// Messages stored before the measured calls.
    pub messages: u64,
    /// Batched ingest, microseconds per message.
    pub batched_ingest_us_per_message: f64,
    /// One turn's messages per call.
    pub turn_ingest: Latency,
    /// Assembly with prompt recall.
    pub assemble: Latency,
    /// `lcm_grep`, full text, whole store.
    pub grep: Latency,
    /// Bytes the store takes (SQLite: the file and its log; PostgreSQL: our tables with
    /// their indexes).
    pub store_bytes: u64,
    /// Bytes of message text stored.
    pub raw_text_bytes: u64,
    /// With semantic recall: items (messages) embedded per second by the backfill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_per_second: Option<f64>,
}

/// Search words of the workload's vocabulary, rare and common.
const GREP_WORDS: &[&str] = &[
    "timeout",
    "migration",
    "parser",
    "latency",
    "cache",
    "deploy",
    "schema",
    "retry",
];

/// A store under measurement and what removes it afterwards.
struct Opened {
    store: Arc<dyn Backend>,
    _dir: Option<tempfile::TempDir>,
    cleanup: Option<(PgTarget, String)>,
    sqlite_path: Option<std::path::PathBuf>,
    pg: Option<PgStore>,
}

async fn open(kind: BackendKind, opts: &StoreBenchOptions, run: usize) -> Result<Opened> {
    match kind {
        BackendKind::Sqlite => {
            let dir = crate::temp_dir().map_err(|e| BenchError::io("temporary directory", e))?;
            let path = dir.path().join("lossless.db");
            let p = path.clone();
            let durability = opts.durability;
            let store = tokio::task::spawn_blocking(move || {
                LosslessStore::open_durable(
                    &p,
                    clawctx_lossless::DEFAULT_BUSY_TIMEOUT_MS,
                    durability,
                )
            })
            .await
            .map_err(|e| BenchError::engine("sqlite", "open", e))?
            .map_err(|e| BenchError::engine("sqlite", "open", e))?;
            let large = LosslessConfig::default().large_payload_bytes;
            store
                .call(move |db| {
                    db.set_large_payload_bytes(large);
                    Ok(())
                })
                .await
                .map_err(|e| BenchError::engine("sqlite", "open", e))?;
            Ok(Opened {
                store: Arc::new(store),
                _dir: Some(dir),
                cleanup: None,
                sqlite_path: Some(path),
                pg: None,
            })
        }
        BackendKind::Postgres => {
            let url = opts.pg_url.as_deref().ok_or_else(|| {
                BenchError::InvalidArgument(
                    "the postgres backend needs a server: --pg-url postgres://… (or --pg-url-env VAR)".into(),
                )
            })?;
            let admin =
                PgTarget::parse(url).map_err(|e| BenchError::engine("postgres", "connect", e))?;
            let name = format!("clawctx_bench_{}_{run}", std::process::id());
            admin_sql(&admin, &format!("DROP DATABASE IF EXISTS {name}")).await?;
            admin_sql(&admin, &format!("CREATE DATABASE {name}")).await?;
            let store = PgStore::open(admin.with_dbname(&name), 8)
                .await
                .map_err(|e| BenchError::engine("postgres", "open", e))?;
            Ok(Opened {
                store: Arc::new(store.clone()),
                _dir: None,
                cleanup: Some((admin, name)),
                sqlite_path: None,
                pg: Some(store),
            })
        }
    }
}

/// Runs `sql` on its own connection to `admin` (statements a pool's transaction cannot hold:
/// `CREATE DATABASE`, `DROP DATABASE`, `VACUUM`).
pub(crate) async fn admin_sql(admin: &PgTarget, sql: &str) -> Result<()> {
    let (client, conn) = admin
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| {
            BenchError::engine("postgres", "connect", format!("{}: {e}", admin.redacted()))
        })?;
    let driver = tokio::spawn(conn);
    let out = client
        .batch_execute(sql)
        .await
        .map_err(|e| BenchError::engine("postgres", "admin", format!("{sql}: {e}")));
    drop(client);
    let _ = driver.await;
    out
}

fn failed(
    kind: BackendKind,
    stage: &str,
) -> impl Fn(clawctx_lossless::LosslessError) -> BenchError + '_ {
    let name = match kind {
        BackendKind::Sqlite => "sqlite",
        BackendKind::Postgres => "postgres",
    };
    move |e| BenchError::engine(name, stage, e)
}

/// Measures one backend at `size` messages.
async fn measure(
    kind: BackendKind,
    size: u64,
    opts: &StoreBenchOptions,
    run: usize,
) -> Result<StoreBenchRow> {
    let opened = open(kind, opts, run).await?;
    let store = opened.store.clone();
    let key = ConvKey::from_host(Some("agent:main:bench"), "bench");
    let extra = (opts.turns as u64) * 4 + 64;
    let mut workload = Workload::new(WorkloadSpec {
        kind: opts.kind,
        messages: size + extra,
        seed: opts.seed,
    });

    // Batched ingest up to `size`.
    let mut batch: Vec<AgentMessage> = Vec::with_capacity(1_000);
    let mut filled = 0u64;
    let mut recent: Vec<AgentMessage> = Vec::new();
    let started = Instant::now();
    while filled < size {
        let Some(turn) = workload.next() else { break };
        filled += turn.messages.len() as u64;
        batch.extend(turn.messages);
        if batch.len() >= 1_000 || filled >= size {
            store
                .ingest(&key, std::mem::take(&mut batch))
                .await
                .map_err(failed(kind, "batched ingest"))?;
        }
    }
    let batched = started.elapsed().as_secs_f64() * 1e6 / filled.max(1) as f64;
    if let Some((admin, name)) = &opened.cleanup {
        // Vacuumed and with planner statistics, as autovacuum keeps a store in use (a table
        // filled a moment ago has no statistics, so the planner walks the whole table for a
        // rare term, and autovacuum would start on it in the middle of the measurement).
        admin_sql(&admin.with_dbname(name), "VACUUM ANALYZE").await?;
    }

    // With a model: the backfill of what was stored, timed; then the background embedder
    // runs during the per-turn ingests, as in an engine.
    let model = opts
        .embedder
        .clone()
        .map(|e| Arc::new(clawctx_lossless::semantic::Semantic::new(e)));
    // What fills the store's vectors: the model, or stand-ins under its identity.
    let semantic = match (&opts.embedder, opts.synthetic_vectors) {
        (Some(e), true) => Some(Arc::new(clawctx_lossless::semantic::Semantic::new(
            Arc::new(SyntheticVectors {
                model_id: e.model_id().to_owned(),
                dim: e.dim(),
            }),
        ))),
        _ => model.clone(),
    };
    let mut embedded_per_second = None;
    if let Some(s) = &semantic {
        let t = Instant::now();
        let n = s
            .embed_all(&*store, |_, _| {})
            .await
            .map_err(failed(kind, "embed"))?;
        embedded_per_second =
            (!opts.synthetic_vectors).then(|| n as f64 / t.elapsed().as_secs_f64().max(1e-9));
    }
    let background = semantic.as_ref().map(|s| s.spawn(store.clone()));

    // Per-turn ingest.
    let mut turn_times = Vec::with_capacity(opts.turns);
    for _ in 0..opts.turns {
        let Some(turn) = workload.next() else { break };
        let msgs = turn.messages;
        recent.extend(msgs.iter().cloned());
        let t = Instant::now();
        store
            .ingest(&key, msgs)
            .await
            .map_err(failed(kind, "turn ingest"))?;
        turn_times.push(t.elapsed());
        if let Some(s) = &semantic {
            s.wake();
        }
    }
    drop(background);
    if let Some(s) = &semantic {
        s.embed_all(&*store, |_, _| {})
            .await
            .map_err(failed(kind, "embed"))?;
    }
    if recent.len() > 40 {
        recent.drain(..recent.len() - 40);
    }

    // Assembly of a new prompt, with prompt recall as the engine asks for it.
    let cfg = LosslessConfig::default();
    let mut assemble_times = Vec::with_capacity(opts.assembles);
    for i in 0..opts.assembles {
        let mut host = recent.clone();
        let word = GREP_WORDS[i % GREP_WORDS.len()];
        let prompt = format!("what did we decide about the {word} before (ref {i})?");
        host.push(AgentMessage::user(prompt.clone()));
        let t = Instant::now();
        let semantic_hits = match &model {
            Some(s) => {
                s.prompt_hits(&*store, &key, &prompt, cfg.prompt_recall_max_messages)
                    .await
            }
            None => Vec::new(),
        };
        let req = AssembleRequest {
            key: key.clone(),
            recent: host,
            budget: opts.budget,
            prompt: None,
            recall_reserve: cfg.prompt_recall_reserve(opts.budget),
            recall_max_messages: cfg.prompt_recall_max_messages,
            recall_max_tokens: cfg.prompt_recall_max_tokens,
            cache_block_share: cfg.cache_block_share,
            whole_first: true,
            semantic: semantic_hits,
            lexical_recall: true,
        };
        store
            .assemble(req)
            .await
            .map_err(failed(kind, "assemble"))?;
        assemble_times.push(t.elapsed());
    }

    // Full-text search of the whole store.
    let mut grep_times = Vec::with_capacity(opts.greps);
    for i in 0..opts.greps {
        let words = if i % 2 == 0 {
            GREP_WORDS[i % GREP_WORDS.len()].to_owned()
        } else {
            format!(
                "{} {}",
                GREP_WORDS[i % GREP_WORDS.len()],
                GREP_WORDS[(i + 3) % GREP_WORDS.len()]
            )
        };
        let t = Instant::now();
        store
            .grep(GrepQuery::new(words, Scope::All))
            .await
            .map_err(failed(kind, "grep"))?;
        grep_times.push(t.elapsed());
    }

    let conv = store
        .conversation(&key)
        .await
        .map_err(failed(kind, "read"))?;
    let raw_text_bytes = conv.map_or(0, |c| c.raw_bytes.max(0) as u64);
    let store_bytes = if let Some(path) = &opened.sqlite_path {
        if let Some(s) = store.as_sqlite() {
            // Closing checkpoints the log into the file.
            s.close_wait().await;
        }
        file_bytes(path)
    } else if let (Some(pg), Some((admin, name))) = (&opened.pg, &opened.cleanup) {
        // Read after a vacuum, so dead space from the run does not count.
        admin_sql(&admin.with_dbname(name), "VACUUM ANALYZE").await?;
        pg.relation_bytes().await.map_err(failed(kind, "size"))?
    } else {
        0
    };
    store.close().await;
    drop(store);
    drop(opened.store);
    drop(opened.pg);
    if let Some((admin, name)) = opened
        .cleanup
        .filter(|_| std::env::var_os("CLAWCTX_BENCH_KEEP_DB").is_none())
    {
        // Give the pool's connections a moment to go, then drop the database (kept with
        // `CLAWCTX_BENCH_KEEP_DB=1`, to look inside).
        tokio::time::sleep(Duration::from_millis(100)).await;
        admin_sql(
            &admin,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )
        .await?;
    }
    Ok(StoreBenchRow {
        backend: kind,
        messages: filled,
        batched_ingest_us_per_message: batched,
        turn_ingest: Latency::of(&turn_times),
        assemble: Latency::of(&assemble_times),
        grep: Latency::of(&grep_times),
        store_bytes,
        raw_text_bytes,
        embedded_per_second,
    })
}

/// Bytes of a SQLite store: the file and its log, when present.
fn file_bytes(path: &std::path::Path) -> u64 {
    let side = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    };
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) + side("-wal")
}

/// Runs the bench: every size, every backend.
pub async fn run_store_bench(opts: &StoreBenchOptions) -> Result<Vec<StoreBenchRow>> {
    let mut rows = Vec::new();
    let mut run = 0;
    for &size in &opts.sizes {
        for &kind in &opts.backends {
            run += 1;
            rows.push(measure(kind, size, opts, run).await?);
        }
    }
    Ok(rows)
}

/// The rows as a text table.
pub fn render_store_table(rows: &[StoreBenchRow]) -> String {
    let mut out = String::from(
        "backend    messages  batch µs/msg  turn p50/p99 ms   assemble p50/p99 ms  grep p50/p99 ms   store MB  × raw text\n",
    );
    for r in rows {
        let name = match r.backend {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
        };
        out.push_str(&format!(
            "{name:<10} {:>8}  {:>12.1}  {:>7.2} / {:<7.2}  {:>8.2} / {:<8.2}  {:>7.2} / {:<7.2}  {:>8.1}  {:>9.2}\n",
            r.messages,
            r.batched_ingest_us_per_message,
            r.turn_ingest.p50_ms,
            r.turn_ingest.p99_ms,
            r.assemble.p50_ms,
            r.assemble.p99_ms,
            r.grep.p50_ms,
            r.grep.p99_ms,
            r.store_bytes as f64 / 1_048_576.0,
            r.store_bytes as f64 / r.raw_text_bytes.max(1) as f64,
        ));
        if let Some(rate) = r.embedded_per_second {
            out.push_str(&format!(
                "{:<10} embedded {rate:.0} messages/s (batches of {})\n",
                "",
                clawctx_lossless::semantic::BATCH
            ));
        }
    }
    out
}
