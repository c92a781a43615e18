//! The rollbacks of subagent spawns prepared through the engine API
//! (`POST /v1/engine/prepareSubagentSpawn`), kept in the gateway until
//! `POST /v1/engine/rollback` runs one or `onSubagentEnded` names its child.
//!
//! In memory only: a restart forgets them (a rollback id from before it is then a 404, as one
//! already run is). The gateway's shared state ([`crate::state`]) holds them, which is why they are not in
//! the engine API's handler module: the state imports no handler.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use clawctx_engine::SubagentSpawnPreparation;

/// Rollbacks kept at most; past it the oldest are dropped (their spawns long launched).
pub const MAX_ROLLBACKS: usize = 1024;

/// The rollbacks of prepared spawns, by id, oldest first.
#[derive(Default)]
pub(crate) struct Rollbacks {
    next: AtomicU64,
    kept: Mutex<VecDeque<(String, String, SubagentSpawnPreparation)>>,
}

impl Rollbacks {
    /// Keeps `preparation` of `child`'s spawn; answers its rollback id.
    pub(crate) fn keep(&self, child: &str, preparation: SubagentSpawnPreparation) -> String {
        let id = (self.next.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back((id.clone(), child.to_owned(), preparation));
        while kept.len() > MAX_ROLLBACKS {
            kept.pop_front();
        }
        id
    }

    /// The rollback `id` names, removed (at most once).
    pub(crate) fn take(&self, id: &str) -> Option<(String, SubagentSpawnPreparation)> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let at = kept.iter().position(|(k, _, _)| k == id)?;
        kept.remove(at).map(|(_, child, p)| (child, p))
    }

    /// Drops the rollbacks of `child`'s spawns (it ended).
    pub(crate) fn forget_child(&self, child: &str) {
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(_, c, _)| c != child);
    }
}
