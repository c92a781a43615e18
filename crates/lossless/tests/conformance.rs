//! The engine conformance suite (`clawctx_test_support::conformance`) run against `lossless`
//! on a real SQLite file per check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use clawctx_engine::ContextEngine;
use clawctx_lossless::{LosslessConfig, LosslessEngine};
use clawctx_test_support::conformance::{self, maker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lossless() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    conformance::run_all(
        "lossless",
        maker(move || {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = dir.path().join(format!("conformance-{n}.db"));
            Arc::new(LosslessEngine::open(&path, LosslessConfig::default()).unwrap()) as Arc<dyn ContextEngine>
        }),
    )
    .await;
}
