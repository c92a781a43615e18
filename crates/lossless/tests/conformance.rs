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
            Arc::new(LosslessEngine::open(&path, LosslessConfig::default()).unwrap())
                as Arc<dyn ContextEngine>
        }),
    )
    .await;
}

/// The same suite on the PostgreSQL store, a fresh database per check (skips without
/// `CLAWCTX_TEST_PG_URL`, except under `CI=true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lossless_on_postgres() {
    use clawctx_lossless::pg::PgStore;
    use clawctx_test_support::pg::{test_database, test_url};
    if test_url().is_none() {
        return;
    }
    // The databases live until the suite ends.
    let databases = Arc::new(std::sync::Mutex::new(Vec::new()));
    let held = databases.clone();
    conformance::run_all(
        "lossless (PostgreSQL)",
        maker(move || {
            let db = test_database("conformance").unwrap();
            let url = db.url.clone();
            held.lock().unwrap().push(db);
            let store = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(PgStore::open_url(&url))
            })
            .unwrap();
            Arc::new(LosslessEngine::over(Arc::new(store), LosslessConfig::default()).unwrap())
                as Arc<dyn ContextEngine>
        }),
    )
    .await;
    drop(databases);
}
