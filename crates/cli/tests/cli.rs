//! The `clawctx` binary as a user runs it: doctor on a fresh state dir, an unknown slot, a
//! malformed config, `--json`, `--fix`, and `config`. A failing test prints the command with its
//! stdout and stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Run;

use std::path::Path;

use serde_json::Value;

fn clawctx(state: &Path, args: &[&str]) -> Run {
    common::run(state, args)
}

fn json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"))
}

#[test]
fn doctor_on_a_fresh_state_dir_reports_legacy_default() {
    let dir = tempfile::tempdir().unwrap();
    let run = clawctx(dir.path(), &["doctor"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("context engine  legacy (plugins.slots.contextEngine is not set"),
        "{run}"
    );
    let j = json(&clawctx(dir.path(), &["doctor", "--json"]));
    assert_eq!(j["schemaVersion"], 1);
    assert_eq!(j["status"], "ok");
    assert_eq!(j["contextEngine"]["effective"], "legacy");
    assert_eq!(j["contextEngine"]["source"], "default");
    assert_eq!(j["contextEngine"]["reason"]["kind"], "slotUnset");
    assert_eq!(j["contextEngine"]["loads"], true);
    assert_eq!(j["configExists"], false);
    assert!(
        !dir.path().join("clawctx.json").exists(),
        "doctor must not create a config"
    );
}

#[test]
fn doctor_reports_an_unregistered_slot_and_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let set = clawctx(
        dir.path(),
        &[
            "config",
            "set",
            "plugins.slots.contextEngine",
            "no-such-engine",
        ],
    );
    assert_eq!(set.code, 0, "{set}");
    let run = clawctx(dir.path(), &["doctor", "--json"]);
    let j = json(&run);
    assert_eq!(j["status"], "warning", "{run}");
    assert_eq!(j["contextEngine"]["configured"], "no-such-engine");
    assert_eq!(j["contextEngine"]["effective"], "legacy");
    assert_eq!(j["contextEngine"]["loads"], false);
    assert_eq!(j["quarantines"][0]["engineId"], "no-such-engine");
    assert_eq!(j["quarantines"][0]["operation"], "resolve");
    assert_eq!(j["quarantines"][0]["reason"], "not registered");
    let text = clawctx(dir.path(), &["doctor"]);
    assert!(
        text.stdout
            .contains("\"no-such-engine\" failed during resolve: not registered"),
        "{text}"
    );
}

#[test]
fn doctor_selects_lossless_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    clawctx(
        dir.path(),
        &["config", "set", "plugins.slots.contextEngine", "lossless"],
    );
    let j = json(&clawctx(dir.path(), &["doctor", "--json"]));
    assert_eq!(j["contextEngine"]["effective"], "lossless");
    assert_eq!(j["contextEngine"]["owner"], "plugin:lossless");
    assert_eq!(j["contextEngine"]["info"]["ownsCompaction"], true);
    // Disabling the plugin keeps the slot and silently serves legacy.
    clawctx(
        dir.path(),
        &["config", "set", "plugins.entries.lossless.enabled", "false"],
    );
    let j = json(&clawctx(dir.path(), &["doctor", "--json"]));
    assert_eq!(j["contextEngine"]["effective"], "legacy");
    assert_eq!(j["contextEngine"]["reason"]["kind"], "policyDisabled");
    assert!(j["quarantines"].as_array().unwrap().is_empty());
}

#[test]
fn malformed_config_is_reported_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clawctx.json");
    std::fs::write(
        &path,
        "{\n  plugins: {\n    slots: { contextEngine: \"x\" }\n    entries: {}\n  }\n}\n",
    )
    .unwrap();
    let run = clawctx(dir.path(), &["doctor"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stdout.contains(&format!("{}:", path.display())),
        "{run}"
    );
    assert!(run.stdout.contains("hint:"), "{run}");
    let before = std::fs::read_to_string(&path).unwrap();
    clawctx(dir.path(), &["doctor", "--fix"]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        before,
        "a broken config is never rewritten"
    );
    let get = clawctx(dir.path(), &["config", "get", "plugins"]);
    assert_ne!(get.code, 0, "{get}");
    assert!(
        get.stderr.contains(":3:") || get.stderr.contains(":4:"),
        "{get}"
    );
}

#[test]
fn config_get_set_unset_round_trip_keeps_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("clawctx.json"),
        "// mine\n{ gateway: { port: 18789 } }\n",
    )
    .unwrap();
    assert_eq!(
        clawctx(dir.path(), &["config", "path"]).stdout.trim(),
        dir.path().join("clawctx.json").display().to_string()
    );
    assert_eq!(
        clawctx(
            dir.path(),
            &[
                "config",
                "set",
                "plugins.entries.lossless.config.freshTailCount",
                "32"
            ]
        )
        .code,
        0
    );
    let got = clawctx(
        dir.path(),
        &[
            "config",
            "get",
            "plugins.entries.lossless.config.freshTailCount",
        ],
    );
    assert_eq!(got.stdout.trim(), "32", "{got}");
    assert_eq!(
        clawctx(dir.path(), &["config", "get", "gateway.port"])
            .stdout
            .trim(),
        "18789"
    );
    assert_eq!(
        clawctx(
            dir.path(),
            &[
                "config",
                "unset",
                "plugins.entries.lossless.config.freshTailCount"
            ]
        )
        .code,
        0
    );
    assert_eq!(
        clawctx(
            dir.path(),
            &[
                "config",
                "get",
                "plugins.entries.lossless.config.freshTailCount"
            ]
        )
        .code,
        1
    );
}

#[test]
fn config_flag_accepts_an_openclaw_json() {
    let dir = tempfile::tempdir().unwrap();
    let oc = dir.path().join("openclaw.json");
    std::fs::write(&oc, "{\n  // OpenClaw's file, as is\n  plugins: { slots: { contextEngine: 'lossless', }, entries: { lossless: { enabled: true } } },\n}\n").unwrap();
    let j = json(&clawctx(
        dir.path(),
        &["--config", oc.to_str().unwrap(), "doctor", "--json"],
    ));
    assert_eq!(j["contextEngine"]["effective"], "lossless");
    assert_eq!(j["configPath"], oc.display().to_string());
}

// §5 / §12.12: doctor warns about hosts that cannot run the selected engine and resets the slot
// with --fix only when no configured host can.
#[test]
fn doctor_host_compatibility_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clawctx.json");
    // lossless needs assemble-before-prompt; a generic CLI backend lacks it.
    std::fs::write(
        &path,
        r#"{ plugins: { slots: { contextEngine: "lossless" } },
             agents: { defaults: { model: { primary: "claude-cli/opus", fallbacks: ["openai/gpt-4o"] }, cliBackends: { "claude-cli": { command: "claude" } } } } }"#,
    )
    .unwrap();
    let j = json(&clawctx(dir.path(), &["doctor", "--json"]));
    assert_eq!(j["status"], "warning");
    let hosts = j["hostCompatibility"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{j:#}");
    assert_eq!(hosts[0]["id"], "cli:claude-cli");
    assert_eq!(hosts[0]["ok"], false);
    assert_eq!(hosts[0]["missingCapabilities"][0], "assemble-before-prompt");
    assert_eq!(hosts[1]["ok"], true);
    let fixed = json(&clawctx(dir.path(), &["doctor", "--json", "--fix"]));
    assert!(
        fixed["fixes"].as_array().unwrap().is_empty(),
        "one compatible host: warn only, never rewrite the slot"
    );

    std::fs::write(
        &path,
        r#"{ plugins: { slots: { contextEngine: "lossless" } },
             agents: { defaults: { model: { primary: "claude-cli/opus" }, cliBackends: { "claude-cli": { command: "claude" } } } } }"#,
    )
    .unwrap();
    let run = clawctx(dir.path(), &["doctor", "--fix"]);
    assert!(
        run.stdout.contains("Reset plugins.slots.contextEngine to the default \"legacy\" because context engine \"lossless\" is incompatible with every configured agent-run host."),
        "{run}"
    );
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(
        !after.contains("contextEngine") && !after.contains("\"slots\""),
        "the slot and the emptied slots object are gone: {after}"
    );
    assert!(
        after.contains("claude-cli"),
        "everything else is kept: {after}"
    );
}

#[test]
fn outbox_files_left_by_a_killed_writer_are_reported_by_doctor_and_removed_when_the_gateway_starts()
{
    use std::io::BufRead;
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let outbox = dir.path().join("runtime").join("outbox");
    std::fs::create_dir_all(&outbox).unwrap();
    // What a kill between a commit's temporary file and its rename leaves: the writer's pid in
    // the name (a process that has ended), or an older build's name and an old date.
    let mut ended = std::process::Command::new("true").spawn().unwrap();
    let gone = ended.id();
    ended.wait().unwrap();
    let of_gone = outbox.join(format!(".tmp.{gone}.AbC123"));
    let old = outbox.join(".tmpXyZ789");
    // What a running writer holds right now: never touched.
    let of_running = outbox.join(format!(".tmp.{}.QrS456", std::process::id()));
    let fresh = outbox.join(".tmpNeW000");
    for f in [&of_gone, &old, &of_running, &fresh] {
        std::fs::write(f, b"{\"version\": 1, \"sessionKey\": \"agent:ma").unwrap();
    }
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(600))
        .unwrap();

    let run = clawctx(dir.path(), &["doctor"]);
    assert!(
        run.stdout
            .contains("temporary file(s) left by a process stopped"),
        "{run}"
    );
    let j = json(&clawctx(dir.path(), &["doctor", "--json"]));
    let listed: Vec<&str> = j["outbox"]["orphans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [of_gone.to_str().unwrap(), old.to_str().unwrap()],
        "{j}"
    );
    assert_eq!(j["outbox"]["problems"], serde_json::json!([]), "{j}");
    assert_eq!(
        j["status"], "ok",
        "leftovers hold no acknowledged turn: {j}"
    );

    let mut gateway = std::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["gateway", "--port", "0"])
        .env("CLAWCTX_STATE_DIR", dir.path())
        .env_remove("CLAWCTX_LOG")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(gateway.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let _ = gateway.kill();
    let _ = gateway.wait();
    assert!(first.contains("http://"), "the gateway started: {first:?}");
    assert!(
        !of_gone.exists() && !old.exists(),
        "left-overs are removed at start"
    );
    assert!(
        of_running.exists() && fresh.exists(),
        "a live writer's file is kept"
    );
}

#[test]
fn doctor_reports_an_unreadable_outbox_commit_with_its_path() {
    // A durable turn's commit (§1.7) that cannot be read back is never dropped silently.
    let dir = tempfile::tempdir().unwrap();
    let outbox = dir.path().join("runtime").join("outbox");
    std::fs::create_dir_all(&outbox).unwrap();
    let torn = outbox.join("session-1.session-1_a_b.json");
    std::fs::write(
        &torn,
        b"{\"version\": 1, \"sessionKey\": \"agent:main:main\", \"sess",
    )
    .unwrap();
    let run = clawctx(dir.path(), &["doctor"]);
    assert!(run.stdout.contains("[!!] outbox"), "{run}");
    assert!(
        run.stdout.contains(&torn.display().to_string()),
        "doctor names the file: {run}"
    );
    let j = json(&clawctx(dir.path(), &["doctor", "--json"]));
    assert_eq!(j["status"], "warning", "{j}");
    assert_eq!(
        j["outbox"]["problems"][0]["path"],
        torn.display().to_string()
    );
    assert!(
        j["outbox"]["problems"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("line 1"),
        "{j}"
    );
    assert!(torn.exists(), "doctor reports; it does not delete");
}
