//! What the browser tests share: finding Chromium and node, installing the driver
//! (`playwright-core`, from `tests/browser/package-lock.json`), skipping with a reason outside CI
//! and failing under `CI=true`, and running one of the `tests/browser/*.test.mjs` scripts.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The first of `names` on `PATH`.
pub fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// `$CLAWCTX_CHROMIUM`, else `chromium` on `PATH`.
pub fn chromium() -> Option<PathBuf> {
    match std::env::var_os("CLAWCTX_CHROMIUM").map(PathBuf::from) {
        Some(p) if p.is_file() => Some(p),
        _ => find_on_path(&["chromium", "chromium-browser"]),
    }
}

/// Skips (prints why) or, under CI, fails.
pub fn missing(test: &str, what: &str) {
    let msg =
        format!("{test}: {what}; install it (.ci/run does: apt-get install chromium nodejs npm)");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg} (CI=true: the browser test must run)");
    }
    eprintln!("SKIPPED {msg}");
}

/// The scripts' directory, with its driver installed; `None` (after [`missing`]) when Chromium,
/// node or npm is missing. Also answers the Chromium to drive.
pub fn ready(test: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(chromium) = chromium() else {
        missing(test, "no chromium on PATH and no $CLAWCTX_CHROMIUM");
        return None;
    };
    if find_on_path(&["node"]).is_none() || find_on_path(&["npm"]).is_none() {
        missing(test, "node or npm is not on PATH");
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("browser");
    npm_ci(&dir);
    Some((dir, chromium))
}

/// `npm ci` in `dir` unless its driver is installed.
pub fn npm_ci(dir: &Path) {
    if dir.join("node_modules").join("playwright-core").is_dir() {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .status()
        .expect("npm runs");
    assert!(status.success(), "npm ci in {} failed", dir.display());
}

/// Screenshots of the browser tests: `target/test-artifacts/<name>`.
pub fn artifacts(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("target")
        .join("test-artifacts")
        .join(name)
}

/// Runs `node <script>` in `dir` with `env`, and asserts it passed (exit 0 and its final
/// `OK` line), printing its output either way.
pub async fn run_script(dir: PathBuf, script: &str, env: Vec<(String, String)>) -> Output {
    let script = script.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(&script)
            .current_dir(&dir)
            .envs(env)
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    for line in stdout.lines().filter(|l| l.starts_with("FIGURE ")) {
        eprintln!("{line}");
    }
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.lines().any(|l| l == "OK"),
        "the browser test did not finish:\n{stdout}\n{stderr}"
    );
    out
}
