//! The JSON5 config reader (`clawctx-config`): any text gives a value or an error naming file,
//! line and column, never a panic; a config that parsed, written back as JSON (what a write
//! does), reads back as the same value; `check` lists problems of any object without failing.
#![no_main]

use std::path::Path;

use clawctx_config::{check, parse_cli_value, ConfigFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("clawctx.json");
    let _ = parse_cli_value(text);
    match ConfigFile::parse(path, text) {
        Ok(value) => {
            assert!(value.is_object(), "parse answered a non-object: {value}");
            let _ = check(&value);
            let written = serde_json::to_string_pretty(&value).expect("a Value always serializes");
            let again = ConfigFile::parse(path, &written).unwrap_or_else(|e| {
                panic!("the config as written does not read back: {e}\n{written}")
            });
            assert_eq!(
                again, value,
                "the config changed through a write and a read"
            );
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(
                shown.starts_with("clawctx.json"),
                "the error does not name the file: {shown}"
            );
        }
    }
});
