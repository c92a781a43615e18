//! The bench runner on a small workload, legacy and lossless: the JSON report has every field,
//! the figures are sane, and no assemble ever went over budget.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use clawctx_bench::runner::{render_table, run_bench, BenchOptions, WorkloadSource};
use clawctx_bench::workload::{WorkloadKind, WorkloadSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_and_lossless_on_a_small_mixed_workload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = WorkloadSpec {
        kind: WorkloadKind::Mixed,
        messages: 400,
        seed: 11,
    };
    let mut opts = BenchOptions::new(
        vec!["legacy".into(), "lossless".into()],
        WorkloadSource::Generated(spec),
        dir.path().to_owned(),
    );
    // A small budget so both engines compact within 400 messages.
    opts.budget = 20_000;
    let report = run_bench(&opts).await.expect("bench");
    let json = serde_json::to_value(&report).expect("json");
    for key in ["workload", "budget", "engines", "ratios"] {
        assert!(json.get(key).is_some(), "report lacks {key}");
    }
    assert_eq!(report.engines.len(), 2);
    for e in &report.engines {
        let j = serde_json::to_value(e).expect("json");
        for key in [
            "ingest",
            "thresholdCheck",
            "compaction",
            "assemble",
            "assembledTokensP50",
            "overBudget",
            "rawTextBytes",
        ] {
            assert!(j.get(key).is_some(), "{}: report lacks {key}", e.engine);
        }
        assert_eq!(e.messages, 400, "{}", e.engine);
        assert_eq!(e.over_budget, 0, "{}: assembled over budget", e.engine);
        assert!(e.assembled_tokens_max <= 20_000, "{}", e.engine);
        assert!(
            e.assembled_tokens_last > 1_000,
            "{}: assembled almost nothing ({})",
            e.engine,
            e.assembled_tokens_last
        );
        assert!(
            e.assemble.count > 100,
            "{}: assemble not run per turn",
            e.engine
        );
        assert!(
            e.compaction.count >= 1,
            "{}: no compaction at budget 20k over ~200k tokens",
            e.engine
        );
        assert!(
            e.compaction.summarizer_calls >= e.compaction.count,
            "{}",
            e.engine
        );
        assert!(
            e.compaction.summarizer_input_tokens > 10_000,
            "{}",
            e.engine
        );
        assert!(e.raw_text_bytes > 200_000, "{}", e.engine);
    }
    let legacy = &report.engines[0];
    let lossless = &report.engines[1];
    assert!(
        legacy.grep.is_none() && legacy.disk_bytes.is_none(),
        "legacy has no store"
    );
    let grep = lossless.grep.as_ref().expect("lossless has recall");
    assert!(grep.full_text_hits > 0, "lossless grep found nothing");
    assert!(lossless.disk_bytes.unwrap_or(0) > 0);
    assert!(lossless.summaries.unwrap_or(0) >= 1);
    assert!(!report.ratios.is_empty(), "two engines must give ratios");
    let table = render_table(&report);
    assert!(
        table.contains("legacy") && table.contains("lossless") && table.contains("ratios"),
        "{table}"
    );
}
