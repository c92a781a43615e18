//! Issue #15: `clawctx replay --engine ID` runs any engine `run` and `chat` can use — a Node
//! plugin linked with `plugins install -l` included — and an id that is not registered is an
//! error naming it and the known engines, never a silent replay on `legacy`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::clawctx;
use serde_json::Value;

/// The example plugin's id (`examples/plugins/seed-node-engine/openclaw.plugin.json`).
const PLUGIN_ENGINE: &str = "my-engine";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// A state dir with the example Node plugin linked and the config slot put back on `legacy`,
/// so only `--engine` can select the plugin; plus a 6-turn recording (tool calls included).
fn linked_plugin_and_recording(dir: &Path) -> (PathBuf, PathBuf) {
    assert!(
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "node is required to run the example plugin"
    );
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let seed = repo("examples/plugins/seed-node-engine");
    let (code, out, err) = clawctx(
        &state,
        &["plugins", "install", "-l", seed.to_str().unwrap()],
    );
    assert_eq!(code, 0, "plugins install -l:\n{out}\n{err}");
    let (code, out, err) = clawctx(
        &state,
        &["config", "set", "plugins.slots.contextEngine", "legacy"],
    );
    assert_eq!(code, 0, "config set:\n{out}\n{err}");

    let recording = dir.join("recording.jsonl");
    let text: String = clawctx_test_support::messages::conversation(5, 6, 3)
        .iter()
        .map(|m| format!("{}\n", serde_json::to_string(m).unwrap()))
        .collect();
    std::fs::write(&recording, text).unwrap();
    (state, recording)
}

#[test]
fn replay_with_a_linked_node_plugin_reports_it_as_every_turns_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (state, recording) = linked_plugin_and_recording(dir.path());
    let (code, out, err) = clawctx(
        &state,
        &[
            "replay",
            recording.to_str().unwrap(),
            "--engine",
            PLUGIN_ENGINE,
            "--json",
        ],
    );
    assert_eq!(code, 0, "replay --engine {PLUGIN_ENGINE}:\n{out}\n{err}");
    let report: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}\n{err}"));
    assert_eq!(report["engineConfigured"], PLUGIN_ENGINE, "{report:#}");
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(
        turns.len(),
        6,
        "one report line per recorded turn: {report:#}"
    );
    for t in turns {
        assert_eq!(
            t["engine"], PLUGIN_ENGINE,
            "every turn must run on the linked plugin, not fall back to legacy: {t}\nstderr:\n{err}"
        );
    }
    assert!(
        turns.iter().any(|t| t["toolCalls"].as_u64().unwrap() > 0),
        "the recording's tool calls are replayed: {report:#}"
    );
    assert!(
        !err.contains("warning"),
        "a plugin that serves every turn warns about nothing:\n{err}"
    );
}

#[test]
fn replay_with_an_unregistered_engine_fails_naming_it_and_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (state, recording) = linked_plugin_and_recording(dir.path());
    let (code, out, err) = clawctx(
        &state,
        &[
            "replay",
            recording.to_str().unwrap(),
            "--engine",
            "no-such-engine",
            "--json",
        ],
    );
    assert_ne!(
        code, 0,
        "an unknown --engine must fail, not replay on legacy:\n{out}\n{err}"
    );
    assert!(
        out.trim().is_empty(),
        "no report for an unknown engine:\n{out}"
    );
    assert!(
        err.contains("engine \"no-such-engine\" is not registered"),
        "the error names the id:\n{err}"
    );
    let known = err
        .split("known engines:")
        .nth(1)
        .unwrap_or_else(|| panic!("the error lists the known engines:\n{err}"));
    for id in ["legacy", "lossless", PLUGIN_ENGINE] {
        assert!(known.contains(id), "the known engines include {id}:\n{err}");
    }
}
