//! Every crate that builds its integration tests as one binary (`autotests = false` and
//! `tests/suite.rs`, see ARCHITECTURE.md, Testing) names each file of its `tests/` folder in that
//! suite. Cargo no longer finds test files by itself there, so a new `tests/foo.rs` left out of
//! `suite.rs` would never be compiled nor run, and nothing else would say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;

/// The `mod NAME;` lines of a suite file (with or without attributes before them).
fn declared_modules(suite: &str) -> BTreeSet<String> {
    suite
        .lines()
        .filter_map(|line| line.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// The `.rs` files directly under `tests/`, but the suite itself, as module names.
fn test_files(tests: &Path) -> BTreeSet<String> {
    std::fs::read_dir(tests)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|stem| stem != "suite")
        .collect()
}

#[test]
fn every_test_file_of_a_one_binary_crate_is_a_module_of_its_suite() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut suites = 0;
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        if !manifest
            .lines()
            .any(|line| line.trim() == "autotests = false")
        {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(suite) = std::fs::read_to_string(dir.join("tests/suite.rs")) else {
            problems.push(format!("{name}: autotests = false but no tests/suite.rs"));
            continue;
        };
        if !manifest.contains("path = \"tests/suite.rs\"") {
            problems.push(format!(
                "{name}: Cargo.toml has no [[test]] for tests/suite.rs"
            ));
        }
        suites += 1;
        let declared = declared_modules(&suite);
        for file in test_files(&dir.join("tests")) {
            if !declared.contains(&file) {
                problems.push(format!(
                    "{name}: tests/{file}.rs is not `mod {file};` in tests/suite.rs, so it never runs"
                ));
            }
        }
    }
    assert!(
        suites >= 7,
        "found {suites} one-binary crates under {}",
        crates.display()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_module_reader_reads_attributed_and_plain_declarations() {
    let suite = "//! doc\n\n#[macro_use]\nmod common;\n\nmod a;\nmod b_c;\n// mod commented;\n";
    assert_eq!(
        declared_modules(suite),
        ["a", "b_c", "common"].map(String::from).into()
    );
}
