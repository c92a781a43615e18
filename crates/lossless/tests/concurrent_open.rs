//! Several processes starting on one new SQLite store at once (two gateways, a gateway and
//! `clawctx lcm`): every one of them opens it. Found by the crash campaign (`clawctx bench
//! crash`, kill point `concurrent`), two races in `store::schema::open`:
//! - an opener that lost the race read the file's application id before the winner's schema
//!   transaction committed and its table count after, and refused the store as "a SQLite
//!   database that is not a clawctx lossless store" (the checks now read one snapshot);
//! - switching the new file to WAL needs it to itself, and SQLite answers busy at once there,
//!   without the busy timeout, so an opener failed with "database is locked" (the switch is
//!   now retried for up to the busy timeout).
//!
//! Connections on threads of one process take the same file locks as processes do, so the
//! race is run with threads, many times over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};

use clawctx_lossless::LosslessStore;

#[test]
fn openers_racing_on_a_new_store_all_open_it() {
    const OPENERS: usize = 6;
    for round in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lcm.db");
        let barrier = Arc::new(Barrier::new(OPENERS));
        let handles: Vec<_> = (0..OPENERS)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    LosslessStore::open(&path).map(|store| store.close())
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            if let Err(e) = h.join().unwrap() {
                panic!("round {round}: opener {i} of {OPENERS} could not open the new store: {e}");
            }
        }
        // And the store they made is whole.
        let store = LosslessStore::open(&path).unwrap();
        store.close();
    }
}
