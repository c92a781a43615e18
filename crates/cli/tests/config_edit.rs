//! `clawctx --config openclaw.json config set|unset` on a user's own JSON5 file: the file is
//! edited in place, its comments and layout kept byte for byte outside the changed value; a file
//! that cannot be edited so is refused and left alone. Also: `clawctx lcm --help` names every
//! `lcm` command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::Run;

fn clawctx(state: &Path, args: &[&str]) -> Run {
    common::run(state, args)
}

const OPENCLAW_JSON: &str = "// OpenClaw's own config\n{\n  agents: { defaults: { model: { primary: 'local/my-model' } } }, // the agent\n  /* engines */\n  plugins: {\n    slots: { contextEngine: 'legacy' },\n    entries: {\n      lossless: {\n        config: {\n          freshTailCount: 8, // small\n        },\n      },\n    },\n  },\n}\n";

#[test]
fn config_set_and_unset_keep_a_commented_openclaw_json_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let oc = dir.path().join("openclaw.json");
    std::fs::write(&oc, OPENCLAW_JSON).unwrap();
    let flag = oc.to_str().unwrap();
    let set = |key: &str, value: &str| {
        let r = clawctx(dir.path(), &["--config", flag, "config", "set", key, value]);
        assert_eq!(r.code, 0, "{r}");
        std::fs::read_to_string(&oc).unwrap()
    };
    let text = set("plugins.slots.contextEngine", "lossless");
    assert_eq!(
        text,
        OPENCLAW_JSON.replace("contextEngine: 'legacy'", "contextEngine: 'lossless'")
    );
    let text = set("plugins.entries.lossless.config.freshTailCount", "32");
    assert_eq!(
        text,
        OPENCLAW_JSON
            .replace("contextEngine: 'legacy'", "contextEngine: 'lossless'")
            .replace("freshTailCount: 8,", "freshTailCount: 32,")
    );
    let r = clawctx(
        dir.path(),
        &[
            "--config",
            flag,
            "config",
            "unset",
            "plugins.entries.lossless.config.freshTailCount",
        ],
    );
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        std::fs::read_to_string(&oc).unwrap(),
        OPENCLAW_JSON
            .replace("contextEngine: 'legacy'", "contextEngine: 'lossless'")
            .replace(
                "config: {\n          freshTailCount: 8, // small\n        },",
                "config: {},"
            )
    );
    // Nothing else was left in the directory (the write is a temp file renamed into place).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "runtime")
        .collect();
    assert_eq!(names, vec!["openclaw.json".to_owned()], "{names:?}");
}

#[test]
fn a_file_that_cannot_be_kept_is_refused_with_what_to_do_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let oc = dir.path().join("openclaw.json");
    let original =
        "{ plugins: { slots: { contextEngine: 'a' }, slots: { contextEngine: 'b' } } }\n";
    std::fs::write(&oc, original).unwrap();
    let r = clawctx(
        dir.path(),
        &[
            "--config",
            oc.to_str().unwrap(),
            "config",
            "set",
            "plugins.slots.contextEngine",
            "lossless",
        ],
    );
    assert_eq!(r.code, 1, "{r}");
    assert!(r.stderr.contains("nothing was written"), "{r}");
    assert!(
        r.stderr
            .contains("edit it by hand: set `plugins.slots.contextEngine` to \"lossless\""),
        "{r}"
    );
    assert_eq!(std::fs::read_to_string(&oc).unwrap(), original);
}

#[test]
fn lcm_help_names_every_lcm_command() {
    let dir = tempfile::tempdir().unwrap();
    let help = clawctx(dir.path(), &["lcm", "--help"]);
    assert_eq!(help.code, 0, "{help}");
    let about = help.stdout.lines().next().unwrap_or_default().to_owned();
    let commands: Vec<&str> = help
        .stdout
        .split("Commands:")
        .nth(1)
        .expect("a Commands: section")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 8, "{help}");
    for c in &commands {
        assert!(about.contains(c), "`{c}` is missing from `{about}`");
    }
    let top = clawctx(dir.path(), &["--help"]);
    let lcm_line = top
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("lcm "))
        .unwrap_or_default()
        .to_owned();
    for c in &commands {
        assert!(lcm_line.contains(c), "`{c}` is missing from `{lcm_line}`");
    }
}

#[test]
fn plugins_install_and_uninstall_keep_the_users_comments() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let original = "// my clawctx config\n{\n  gateway: { port: 18790 }, // not the default\n}\n";
    std::fs::write(state.join("clawctx.json"), original).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/node-memories");
    let r = clawctx(
        state,
        &["plugins", "install", "-l", fixture.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{r}");
    let text = std::fs::read_to_string(state.join("clawctx.json")).unwrap();
    assert!(
        text.starts_with(
            "// my clawctx config\n{\n  gateway: { port: 18790 }, // not the default\n"
        ),
        "{text}"
    );
    assert!(text.contains("plugins: {"), "{text}");
    let id = "memories";
    let r = clawctx(state, &["plugins", "uninstall", id]);
    assert_eq!(r.code, 0, "{r}");
    let text = std::fs::read_to_string(state.join("clawctx.json")).unwrap();
    assert!(text.starts_with("// my clawctx config\n"), "{text}");
    assert!(text.contains("// not the default"), "{text}");
}
