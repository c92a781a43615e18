//! `clawctx plugins …` with a real Node plugin (the seed's example engine): install -l selects
//! it and doctor shows it loaded; disable keeps the slot and serves legacy; uninstall resets the
//! slot. Needs `node` on PATH: fails loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::clawctx;
use serde_json::Value;

fn seed_plugin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins/seed-node-engine")
}

fn doctor(state: &Path) -> Value {
    let (code, out, err) = clawctx(state, &["doctor", "--json"]);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}); exit {code}\n{out}\n{err}"))
}

#[test]
fn install_link_select_doctor_disable_uninstall() {
    assert!(
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "node is required for plugin tests"
    );
    let dir = tempfile::tempdir().unwrap();
    let plugin = seed_plugin();
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", plugin.to_str().unwrap()],
    );
    assert_eq!(code, 0, "install -l failed:\n{out}\n{err}");
    assert!(out.contains("linked plugin"), "{out}");

    let j = doctor(dir.path());
    let id = j["plugins"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no plugin in doctor: {j:#}"))
        .to_owned();
    assert_eq!(j["plugins"][0]["loaded"], true, "{j:#}");
    assert_eq!(
        j["contextEngine"]["configured"],
        id.as_str(),
        "install selects the engine: {j:#}"
    );
    assert_eq!(j["contextEngine"]["effective"], id.as_str(), "{j:#}");
    assert_eq!(j["contextEngine"]["loads"], true);
    assert_eq!(j["contextEngine"]["owner"], format!("plugin:{id}"));

    let (code, list, _) = clawctx(dir.path(), &["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(list.contains(&id) && list.contains("enabled"), "{list}");

    assert_eq!(clawctx(dir.path(), &["plugins", "disable", &id]).0, 0);
    let j = doctor(dir.path());
    assert_eq!(j["contextEngine"]["effective"], "legacy");
    assert_eq!(
        j["contextEngine"]["configured"],
        id.as_str(),
        "disable keeps the slot"
    );

    assert_eq!(clawctx(dir.path(), &["plugins", "enable", &id]).0, 0);
    assert_eq!(
        doctor(dir.path())["contextEngine"]["effective"],
        id.as_str()
    );

    let (code, out, err) = clawctx(dir.path(), &["plugins", "uninstall", &id]);
    assert_eq!(code, 0, "{out}\n{err}");
    let j = doctor(dir.path());
    assert_eq!(j["contextEngine"]["effective"], "legacy");
    assert!(j["plugins"].as_array().unwrap().is_empty(), "{j:#}");
    assert_ne!(
        j["contextEngine"]["configured"],
        id.as_str(),
        "uninstall resets the slot"
    );
    assert!(
        plugin.join("openclaw.plugin.json").exists(),
        "a linked directory is never deleted"
    );
}

#[test]
fn install_refuses_a_world_writable_plugin_directory() {
    use std::os::unix::fs::PermissionsExt;
    let state = tempfile::tempdir().unwrap();
    let plugin = tempfile::tempdir().unwrap();
    for file in ["openclaw.plugin.json", "package.json", "index.js"] {
        std::fs::copy(seed_plugin().join(file), plugin.path().join(file)).unwrap();
    }
    std::fs::set_permissions(plugin.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for args in [
        &["plugins", "install", "-l"][..],
        &["plugins", "install"][..],
    ] {
        let mut args = args.to_vec();
        args.push(plugin.path().to_str().unwrap());
        let (code, out, err) = clawctx(state.path(), &args);
        assert_ne!(
            code,
            0,
            "`clawctx {}` accepted a world-writable plugin directory:\n{out}\n{err}",
            args.join(" ")
        );
        assert!(
            err.contains("world-writable") && err.contains("chmod o-w"),
            "the error should say what is wrong and how to fix it:\n{err}"
        );
    }
    let (_, list, _) = clawctx(state.path(), &["plugins", "list"]);
    assert!(
        !list.contains("my-engine"),
        "a refused plugin was recorded:\n{list}"
    );
    std::fs::set_permissions(plugin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", "-l", plugin.path().to_str().unwrap()],
    );
    assert_eq!(code, 0, "once fixed, install -l works:\n{out}\n{err}");
}

#[test]
fn install_a_package_archive_through_npm() {
    assert!(
        Command::new("npm")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "npm is required for plugin tests"
    );
    let state = tempfile::tempdir().unwrap();
    let packs = tempfile::tempdir().unwrap();
    let packed = Command::new("npm")
        .arg("pack")
        .arg(seed_plugin())
        .arg("--pack-destination")
        .arg(packs.path())
        .output()
        .expect("npm pack runs");
    assert!(
        packed.status.success(),
        "npm pack failed: {}",
        String::from_utf8_lossy(&packed.stderr)
    );
    let archive = packs.path().join("seed-node-engine-0.1.0.tgz");
    assert!(archive.is_file(), "npm pack wrote no {}", archive.display());

    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", archive.to_str().unwrap()],
    );
    assert_eq!(code, 0, "installing the archive failed:\n{out}\n{err}");
    let installed = state
        .path()
        .join("plugins/npm/node_modules/seed-node-engine/openclaw.plugin.json");
    assert!(
        installed.is_file(),
        "the package is not under the state dir's npm prefix:\n{out}"
    );
    let j = doctor(state.path());
    let id = j["plugins"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no plugin in doctor: {j:#}"))
        .to_owned();
    assert_eq!(j["plugins"][0]["loaded"], true, "{j:#}");
    assert_eq!(j["contextEngine"]["effective"], id.as_str(), "{j:#}");
    let (_, list, _) = clawctx(state.path(), &["plugins", "list"]);
    assert!(list.contains("npm"), "the source is npm: {list}");

    // Not an archive of a package: a clear error naming the file.
    let bogus = packs.path().join("bogus.tgz");
    std::fs::write(&bogus, b"not a tarball").unwrap();
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", bogus.to_str().unwrap()],
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("bogus.tgz") && err.contains("not a package archive"),
        "{err}"
    );
}
