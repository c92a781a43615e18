//! The config as the dashboard shows it: every secret masked.
//!
//! A string is masked when its key names a secret (API keys, tokens, passwords, secrets,
//! authorization and cookie headers, private keys, credentials), except keys that name where a
//! secret comes from rather than the secret itself (`tokenEnv`, `apiKeyEnv`, …) and numbers
//! (`maxTokens` is not a token). Any string that is a URL with a password in it
//! (`postgres://user:pass@host/db`) keeps everything but the password. OpenClaw secret
//! references (`{"source": "env", "id": "VAR"}`) name a variable and are shown.

use serde_json::{Map, Value};

/// What a masked value becomes.
pub const MASK: &str = "••••••";

fn secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace(['_', '-'], "");
    if k.ends_with("env") || k.ends_with("envvar") || k.ends_with("file") || k.ends_with("path") {
        return false;
    }
    const NEEDLES: [&str; 10] = [
        "apikey",
        "token",
        "password",
        "passwd",
        "secret",
        "authorization",
        "cookie",
        "privatekey",
        "credential",
        "bearer",
    ];
    NEEDLES.iter().any(|n| k.contains(n)) || k == "key"
}

/// `scheme://user:password@host…` with the password masked; `None` when there is none.
fn mask_url_password(s: &str) -> Option<String> {
    let scheme_end = s.find("://")? + 3;
    let rest = &s[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let at = authority.rfind('@')?;
    let userinfo = &authority[..at];
    let colon = userinfo.find(':')?;
    if colon + 1 == userinfo.len() {
        return None;
    }
    Some(format!(
        "{}{}:{MASK}{}",
        &s[..scheme_end],
        &userinfo[..colon],
        &s[scheme_end + at..]
    ))
}

/// `v` with every secret masked.
pub fn mask(v: &Value) -> Value {
    mask_in(v, None)
}

fn mask_in(v: &Value, key: Option<&str>) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, v) in m {
                out.insert(k.clone(), mask_in(v, Some(k)));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| mask_in(i, key)).collect()),
        Value::String(s) if key.is_some_and(secret_key) && !s.is_empty() => {
            Value::String(MASK.into())
        }
        Value::String(s) => Value::String(mask_url_password(s).unwrap_or_else(|| s.clone())),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_tokens_passwords_and_url_passwords_are_masked_and_nothing_else() {
        let config = json!({
            "models": {"providers": {"openai": {"apiKey": "sk-live-123", "baseUrl": "https://api.example.com/v1",
                "headers": {"Authorization": "Bearer abc", "X-Trace": "on"},
                "models": [{"id": "m", "maxTokens": 1024, "contextWindow": 8000}]}}},
            "gateway": {"auth": {"token": "gw-secret", "tokenEnv": "MY_TOKEN"}},
            "plugins": {"entries": {"lossless": {"config": {
                "databaseUrl": "postgres://clawctx:hunter2@db.internal:5432/lcm",
                "password": "pw", "api_key": "k2", "clientSecret": "s3", "summaryModel": "gpt"
            }}}},
            "secretRef": {"token": {"source": "env", "id": "GW_TOKEN"}}
        });
        let masked = mask(&config);
        let text = masked.to_string();
        for secret in [
            "sk-live-123",
            "Bearer abc",
            "gw-secret",
            "hunter2",
            "\"pw\"",
            "k2",
            "s3",
        ] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert_eq!(masked["models"]["providers"]["openai"]["apiKey"], MASK);
        assert_eq!(
            masked["models"]["providers"]["openai"]["headers"]["X-Trace"],
            "on"
        );
        assert_eq!(
            masked["models"]["providers"]["openai"]["models"][0]["maxTokens"],
            1024
        );
        assert_eq!(masked["gateway"]["auth"]["tokenEnv"], "MY_TOKEN");
        assert_eq!(
            masked["plugins"]["entries"]["lossless"]["config"]["databaseUrl"],
            format!("postgres://clawctx:{MASK}@db.internal:5432/lcm")
        );
        assert_eq!(
            masked["plugins"]["entries"]["lossless"]["config"]["summaryModel"],
            "gpt"
        );
        assert_eq!(masked["secretRef"]["token"]["id"], "GW_TOKEN");
        assert_eq!(
            masked["models"]["providers"]["openai"]["baseUrl"],
            "https://api.example.com/v1"
        );
    }

    #[test]
    fn urls_without_a_password_stay() {
        assert_eq!(mask_url_password("postgres://user@host/db"), None);
        assert_eq!(mask_url_password("https://example.com/a@b"), None);
        assert_eq!(
            mask_url_password("redis://:pw@host").as_deref(),
            Some("redis://:••••••@host")
        );
    }
}
