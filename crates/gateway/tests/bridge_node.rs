//! The OpenClaw bridge plugin's own tests (`sdk/openclaw-bridge/test/`, `node --test` with a fake
//! OpenClaw `api` and a fake gateway on loopback), run here so `cargo test --workspace` covers
//! them. A failure prints node's output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn openclaw_bridge_node_tests_pass() {
    let pkg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/openclaw-bridge");
    let out = Command::new("node")
        .current_dir(&pkg)
        .args(["--test", "test/"])
        .env_remove("NODE_OPTIONS")
        .output()
        .expect("node runs (Node 20 is needed for the plugin SDK tests)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node --test test/ in {}\nexit: {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        pkg.display(),
        out.status.code()
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
}
