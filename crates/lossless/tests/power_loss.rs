//! Power loss (issue #20, item 2): the SQLite store under a simulated power cut, per
//! `durability` setting.
//!
//! The store runs a workload (per-turn ingest, large batches, `commitTurn`, a forced
//! compaction every few turns, the background checkpoints) through
//! `clawctx_sqlite_power_cut`, a VFS shim that records what the OS was told to sync. The
//! power goes at a random I/O operation (a write, truncate, sync or delete of the store's
//! files, on any of its threads); the files are then rebuilt as the disk would hold them, two
//! ways: every unsynced write lost, and some of them kept (up to a random point in order, or
//! a random subset), torn at sector boundaries. Each is opened again through the normal VFS
//! and checked:
//! - `PRAGMA integrity_check` is `ok`, the store opens (is not refused) and `doctor` is clean;
//! - no turn is stored twice or in part (a turn is one transaction), and a `commitTurn` key
//!   is recorded exactly when its turn's messages are stored;
//! - with `durability: "full"`, every turn acknowledged before the cut is there;
//! - with `"normal"`, acknowledged turns may be missing (the commits since the last synced
//!   checkpoint): counted and reported, not a failure.
//!
//! `cargo test` runs a few cuts per setting; `CLAWCTX_POWER_CUTS=200` runs that many (the
//! figures are printed, one line per setting and loss model).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::{AgentMessage, IngestBatchParams};
use clawctx_sqlite_power_cut::{Loss, PowerCut};
use common::*;

/// Turns of the workload (enough for background checkpoints to run).
const TURNS: usize = 140;
/// A forced compaction every this many turns.
const COMPACT_EVERY: usize = 12;

fn cfg(durability: Durability) -> LosslessConfig {
    LosslessConfig {
        durability,
        fresh_tail_count: 4,
        leaf_chunk_tokens: 400,
        leaf_min_fanout: 2,
        condensed_min_fanout: 2,
        summary_prefix_target_tokens: 300,
        min_salient_retention: 0.0,
        ..Default::default()
    }
}

/// How turn `t` is stored: most are a user message and an answer through `ingestBatch`;
/// every tenth (from 4) is a large batch (80 messages: the batched path, whose full-text
/// indexing runs in a transaction of its own after the answer); every tenth (from 7) goes
/// through `commitTurn` with an advancement key (messages and key in one transaction).
fn shape(t: usize) -> (usize, bool) {
    match t % 10 {
        4 => (80, false),
        7 => (2, true),
        _ => (2, false),
    }
}

/// Turn `t`'s messages, needles `nd<t>x<k>`.
fn turn_of(rng: &mut Lcg, t: usize) -> Vec<AgentMessage> {
    let ts = 1_700_000_000_000i64 + (t as i64) * 60_000;
    (0..shape(t).0)
        .map(|k| {
            let at = ts + k as i64;
            if k % 2 == 0 {
                AgentMessage::user(format!("nd{t}x{k} {}", words(rng, 40))).with_timestamp(at)
            } else {
                AgentMessage::assistant(format!("nd{t}x{k} {}", words(rng, 120))).with_timestamp(at)
            }
        })
        .collect()
}

/// Runs the workload on a store in `live`, stopping at the cut (or cutting at its end).
async fn workload(live: &Path, durability: Durability, cut: &PowerCut, seed: u64) {
    let e = LosslessEngine::open(live.join("lcm.db"), cfg(durability))
        .unwrap()
        .with_summarizer(FakeSummarizer::new(0));
    let mut rng = Lcg(seed);
    for t in 0..TURNS {
        if cut.is_cut() {
            break;
        }
        let messages = turn_of(&mut rng, t);
        // The live files take every write, before and after the cut: ingest cannot fail.
        if shape(t).1 {
            e.commit_turn(&commit_params(t, messages), &cx())
                .await
                .unwrap();
        } else {
            let p = IngestBatchParams {
                session_id: "s1".into(),
                session_key: Some(KEY.into()),
                messages,
                is_heartbeat: None,
            };
            e.ingest_batch(&p, &cx()).await.unwrap();
        }
        cut.note_ack(t as u64 + 1);
        if t % COMPACT_EVERY == COMPACT_EVERY - 1 {
            e.compact(&compact_params(true, 2_000), &cx())
                .await
                .unwrap();
        }
    }
    cut.cut_now();
    let store = e.store().unwrap().clone();
    drop(e);
    store.close_wait().await;
}

/// What one reopened cut showed.
#[derive(Default, Debug)]
struct Check {
    acked: u64,
    lost: u64,
    problems: Vec<String>,
}

/// Opens the files a cut left in `dir` and checks them (see the module header).
async fn check(dir: &Path, acked: u64) -> Check {
    let mut out = Check {
        acked,
        ..Default::default()
    };
    let db = dir.join("lcm.db");
    if !db.exists() {
        // The power went before the new store's file was ever synced.
        out.lost = acked;
        return out;
    }
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        match c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)) {
            Ok(r) if r == "ok" => {}
            Ok(r) => out.problems.push(format!("integrity_check: {r}")),
            Err(e) => out.problems.push(format!("integrity_check failed: {e}")),
        }
    }
    let store = match LosslessStore::open(&db) {
        Ok(s) => s,
        Err(e) => {
            out.problems.push(format!("the store does not open: {e}"));
            return out;
        }
    };
    match store.doctor().await {
        Ok(doc) if doc.ok => {}
        Ok(doc) => out.problems.push(format!("doctor: {:?}", doc.issues)),
        Err(e) => out.problems.push(format!("doctor failed: {e}")),
    }
    let (found, keys): (BTreeMap<String, usize>, Vec<String>) = store
        .call(|db| {
            db.tx(|c| {
                let mut st = c.prepare("SELECT text FROM message_rows")?;
                let mut out = BTreeMap::new();
                for text in st.query_map([], |r| r.get::<_, String>(0))? {
                    let text = text?;
                    let needle = text.split(' ').next().unwrap_or_default().to_owned();
                    *out.entry(needle).or_insert(0) += 1;
                }
                let mut st = c.prepare("SELECT advancement_key FROM turn_commits")?;
                let keys = st
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                Ok((out, keys))
            })
        })
        .await
        .unwrap();
    store.close_wait().await;
    for t in 0..TURNS {
        let (n, committed) = shape(t);
        let counts: Vec<usize> = (0..n)
            .map(|k| found.get(&format!("nd{t}x{k}")).copied().unwrap_or(0))
            .collect();
        let present = counts.iter().filter(|&&c| c > 0).count();
        if counts.iter().any(|&c| c > 1) {
            out.problems
                .push(format!("turn {t} stored twice: {counts:?}"));
        }
        if present != 0 && present != n {
            out.problems.push(format!(
                "turn {t} stored in part: {present} of {n} messages"
            ));
        }
        if committed {
            let key = keys.contains(&format!("k{t}"));
            if key != (present == n) {
                out.problems.push(format!(
                    "turn {t}: commitTurn key recorded {key} but {present} of {n} messages stored"
                ));
            }
        }
        if (t as u64) < acked && present == 0 {
            out.lost += 1;
        }
    }
    out
}

/// Figures of one setting and loss model over all cuts.
#[derive(Default)]
struct Figures {
    cuts: u64,
    acked: u64,
    lost: u64,
    cuts_with_loss: u64,
    failures: Vec<String>,
}

async fn campaign(durability: Durability, cuts: u64) {
    let name = durability.synchronous().to_ascii_lowercase();
    // One run without a cut counts the operations of the whole workload; each cut then
    // falls on an operation drawn from that range.
    let total_ops = {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        std::fs::create_dir_all(&live).unwrap();
        let pc = PowerCut::track(&live);
        workload(&live, durability, &pc, 1).await;
        pc.ops()
    };
    assert!(
        total_ops > 100,
        "the workload did I/O through the shim ({total_ops} operations)"
    );
    let mut figures = [Figures::default(), Figures::default()];
    let mut rng = Lcg(0x5eed ^ cuts ^ total_ops);
    for i in 0..cuts {
        let op = 1 + rng.below(total_ops);
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        std::fs::create_dir_all(&live).unwrap();
        let pc = PowerCut::track(&live);
        pc.arm(op);
        workload(&live, durability, &pc, i + 2).await;
        for (k, loss) in [Loss::All, Loss::Random { seed: i }]
            .into_iter()
            .enumerate()
        {
            let after = dir.path().join(format!("after-{k}"));
            std::fs::create_dir_all(&after).unwrap();
            let acked = pc.write_after_cut(&after, loss);
            let c = check(&after, acked).await;
            let f = &mut figures[k];
            f.cuts += 1;
            f.acked += c.acked;
            f.lost += c.lost;
            if c.lost > 0 {
                f.cuts_with_loss += 1;
            }
            if !c.problems.is_empty() {
                keep(&pc, loss, &format!("{name}-cut{i}-{k}"));
            }
            for p in c.problems {
                f.failures.push(format!(
                    "cut {i} at operation {op} of {total_ops} ({loss:?}): {p}"
                ));
            }
            if durability == Durability::Full && c.lost > 0 {
                f.failures.push(format!(
                    "cut {i} at operation {op} of {total_ops} ({loss:?}): {} of {} acknowledged turns lost with durability full",
                    c.lost, c.acked
                ));
            }
        }
    }
    for (f, model) in figures.iter().zip([
        "all unsynced writes lost",
        "some unsynced writes kept (in order or not), torn sectors",
    ]) {
        eprintln!(
            "power cuts, durability {name}, {model}: {} cuts, {} turns acknowledged, {} lost ({} cuts lost some), {} integrity/doctor/atomicity failures",
            f.cuts,
            f.acked,
            f.lost,
            f.cuts_with_loss,
            f.failures.len()
        );
    }
    let failures: Vec<&String> = figures.iter().flat_map(|f| &f.failures).collect();
    assert!(
        failures.is_empty(),
        "durability {name}: {} failures after power cuts:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// With `CLAWCTX_POWER_CUT_KEEP=DIR`, a failing cut's files and the trace of the I/O that
/// led to it are copied to `DIR/<label>` for diagnosis.
fn keep(pc: &PowerCut, loss: Loss, label: &str) {
    let Ok(root) = std::env::var("CLAWCTX_POWER_CUT_KEEP") else {
        return;
    };
    let to = Path::new(&root).join(label);
    std::fs::create_dir_all(&to).unwrap();
    // The same files again (the cut is deterministic), as the check found them.
    pc.write_after_cut(&to, loss);
    std::fs::write(to.join("trace.txt"), pc.trace().join("\n")).unwrap();
    eprintln!("kept {}", to.display());
}

fn cuts() -> u64 {
    std::env::var("CLAWCTX_POWER_CUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

// One test per setting; they share the process's VFS shim (each tracks its own directories).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_with_durability_full_lose_nothing_acknowledged() {
    campaign(Durability::Full, cuts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_with_durability_normal_stay_consistent() {
    campaign(Durability::Normal, cuts()).await;
}

/// Regression (found by the campaign above): a new store's file is created in rollback-journal
/// mode, and a journal unlinked without syncing its directory can come back after a power
/// cut; SQLite then plays it over the WAL-mode file and corrupts it. Every journal the store
/// ever unlinks must be unlinked durably (`delete sync_dir=1`).
#[tokio::test]
async fn a_new_store_unlinks_its_creation_journal_durably() {
    let dir = tempfile::tempdir().unwrap();
    let pc = PowerCut::track(dir.path());
    let e = LosslessEngine::open(dir.path().join("lcm.db"), cfg(Durability::Normal)).unwrap();
    let store = e.store().unwrap().clone();
    drop(e);
    store.close_wait().await;
    let trace = pc.trace();
    let deletes: Vec<&String> = trace
        .iter()
        .filter(|l| l.contains("lcm.db-journal delete"))
        .collect();
    assert!(
        !deletes.is_empty(),
        "the new file went through a rollback journal: {trace:#?}"
    );
    assert!(
        deletes.iter().all(|l| l.ends_with("sync_dir=1")),
        "a journal was unlinked without syncing its directory: {deletes:?}"
    );
}
