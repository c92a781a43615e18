//! The gateway's settings, read from the `gateway` section of the OpenClaw-shaped config.
//!
//! OpenClaw's names and defaults where it has them (`gateway.port` 18789, `gateway.bind`
//! `loopback`, `gateway.auth.mode`/`gateway.auth.token`, `gateway.mode` must be `local`,
//! `gateway.customBindHost`), clawctx's own keys beside them for what OpenClaw does not have:
//! `gateway.auth.tokenEnv` (the token from an environment variable named in config, like a
//! provider's `apiKeyEnv`), and the HTTP limits under `gateway.http`. Precedence: flag >
//! environment (`CLAWCTX_GATEWAY_PORT`, `CLAWCTX_GATEWAY_TOKEN`) > config > default.
//!
//! Resolving the settings is where the startup refusals live, before any store or plugin is
//! opened: a bind off loopback without a token refuses to start (OpenClaw's rule), as does an
//! auth mode this gateway does not implement. The token is kept in [`Token`], whose `Debug`
//! never shows it, so a logged config cannot leak it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::Value;

use crate::error::{GatewayError, Result};

/// OpenClaw's default gateway port.
pub const DEFAULT_PORT: u16 = 18789;
/// Default request body limit: OpenClaw's `maxBodyBytes` for chat completions (20 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 20 * 1024 * 1024;
/// Default per-request deadline. A turn is a model call or several, so minutes, not seconds.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Default number of requests that may wait for one session's running turn.
pub const DEFAULT_MAX_QUEUED_PER_SESSION: usize = 8;
/// Default time in-flight requests get to finish after SIGTERM/Ctrl-C.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Environment variable holding the port (between `--port` and `gateway.port`).
pub const PORT_ENV: &str = "CLAWCTX_GATEWAY_PORT";
/// Environment variable holding the token when the config names none.
pub const TOKEN_ENV: &str = "CLAWCTX_GATEWAY_TOKEN";

/// The bearer token clients must send. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        Token(token.into())
    }

    /// The secret itself, for the constant-time comparison only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Flags that override the config (`clawctx gateway --port --bind`).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--port`; `0` lets the OS choose (the chosen port is in the lock file and on stdout).
    pub port: Option<u16>,
    /// `--bind`: a `gateway.bind` mode (`loopback`, `lan`, `auto`, `custom`) or an IP address.
    pub bind: Option<String>,
}

/// Resolved gateway settings.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The bind mode it came from (`loopback`, `lan`, `auto`, `custom`).
    pub bind_mode: String,
    /// The bearer token, when auth is on.
    pub token: Option<Token>,
    /// Largest request body accepted (`gateway.http.maxBodyBytes`); larger bodies get 413.
    pub max_body_bytes: usize,
    /// Deadline of one request (`gateway.http.requestTimeoutMs`); a turn past it is aborted.
    pub request_timeout: Duration,
    /// Requests that may wait for a busy session (`gateway.http.maxQueuedPerSession`); the
    /// next one gets 429.
    pub max_queued_per_session: usize,
    /// Origins allowed by CORS (`gateway.http.allowedOrigins`); empty = CORS closed. A request
    /// whose `Origin` is neither the gateway's own nor listed here is refused (403).
    pub allowed_origins: Vec<String>,
    /// `Host` names served besides the loopback ones (`gateway.http.allowedHosts`, lowercase,
    /// each a name or `name:port`; `*` serves any): a request naming another host is refused
    /// (421), which is what stops DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Time in-flight requests get after a stop signal (`gateway.shutdownTimeoutMs`).
    pub shutdown_timeout: Duration,
    /// Whether `/v1/chat/completions` is served
    /// (`gateway.http.endpoints.chatCompletions.enabled`, default true).
    pub chat_completions: bool,
    /// The per-turn trace (`gateway.trace`: `enabled`, `maxTurnsPerSession`, `maxBytes`).
    pub trace: crate::trace::TraceSettings,
    /// Directories whose files an engine-API caller may name as a transcript
    /// (`gateway.engineApi.transcriptRoots`, absolute, resolved: symbolic links followed), besides
    /// the session's own transcript in the state dir (see `crate::session_files`).
    pub transcript_roots: Vec<std::path::PathBuf>,
}

impl GatewayConfig {
    /// Loopback defaults with no token: what tests and embedders start from.
    pub fn loopback(port: u16) -> Self {
        GatewayConfig {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            bind_mode: "loopback".into(),
            token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_queued_per_session: DEFAULT_MAX_QUEUED_PER_SESSION,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            chat_completions: true,
            trace: crate::trace::TraceSettings::default(),
            transcript_roots: Vec::new(),
        }
    }

    /// Reads the `gateway` section of `root` with `overrides` and `env` on top, and applies the
    /// startup refusals (non-loopback without a token, `gateway.mode` other than `local`, auth
    /// modes this gateway does not implement).
    pub fn resolve(
        root: &Value,
        overrides: &Overrides,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let g = root.get("gateway").cloned().unwrap_or(Value::Null);
        if !g.is_null() && !g.is_object() {
            return Err(GatewayError::config(
                "gateway",
                format!("must be an object; found {g}"),
            ));
        }
        if let Some(mode) = str_at(&g, "mode", "gateway.mode")? {
            if mode != "local" {
                return Err(GatewayError::config(
                    "gateway.mode",
                    format!("Gateway start blocked: set gateway.mode=local (found \"{mode}\")"),
                ));
            }
        }

        let port = match overrides.port {
            Some(p) => p,
            None => match env(PORT_ENV).filter(|v| !v.trim().is_empty()) {
                Some(v) => v.trim().parse::<u16>().map_err(|_| {
                    GatewayError::config(
                        PORT_ENV,
                        format!("must be a port number (0-65535); found \"{v}\""),
                    )
                })?,
                None => match g.get("port") {
                    None | Some(Value::Null) => DEFAULT_PORT,
                    Some(v) => v
                        .as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .ok_or_else(|| {
                            GatewayError::config(
                                "gateway.port",
                                format!("must be a port number (0-65535); found {v}"),
                            )
                        })?,
                },
            },
        };

        let (bind_key, bind) = match &overrides.bind {
            Some(b) => ("--bind", b.trim().to_owned()),
            None => (
                "gateway.bind",
                str_at(&g, "bind", "gateway.bind")?.unwrap_or_else(|| "loopback".into()),
            ),
        };
        let (ip, bind_mode) = match bind.as_str() {
            "loopback" | "auto" => (IpAddr::V4(Ipv4Addr::LOCALHOST), bind.clone()),
            "lan" => (IpAddr::V4(Ipv4Addr::UNSPECIFIED), bind.clone()),
            "custom" => {
                let host = str_at(&g, "customBindHost", "gateway.customBindHost")?;
                let ip = match host {
                    Some(h) => h.parse::<IpAddr>().map_err(|_| {
                        GatewayError::config("gateway.customBindHost", format!("must be an IP address; found \"{h}\""))
                    })?,
                    None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                };
                (ip, bind.clone())
            }
            "tailnet" => {
                return Err(GatewayError::config(
                    bind_key,
                    "\"tailnet\" is not supported by clawctx; use custom with gateway.customBindHost set to the tailnet address",
                ))
            }
            other => match (bind_key, other.parse::<IpAddr>()) {
                ("--bind", Ok(ip)) => (ip, "custom".to_owned()),
                _ => {
                    return Err(GatewayError::config(
                        bind_key,
                        format!(
                            "must be one of loopback, lan, auto, custom{}; found \"{other}\"",
                            if bind_key == "--bind" { " or an IP address" } else { " (host names are not valid here)" }
                        ),
                    ))
                }
            },
        };
        let addr = SocketAddr::new(ip, port);

        let token = resolve_token(&g, env)?;
        if token.is_none() && !ip.is_loopback() {
            return Err(GatewayError::NoAuthOffLoopback {
                addr: addr.to_string(),
            });
        }

        let http = g.get("http").cloned().unwrap_or(Value::Null);
        let max_body_bytes = match u64_at(&http, "maxBodyBytes", "gateway.http.maxBodyBytes")? {
            Some(0) => {
                return Err(GatewayError::config(
                    "gateway.http.maxBodyBytes",
                    "must be at least 1",
                ))
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => DEFAULT_MAX_BODY_BYTES,
        };
        let request_timeout =
            match u64_at(&http, "requestTimeoutMs", "gateway.http.requestTimeoutMs")? {
                Some(0) => {
                    return Err(GatewayError::config(
                        "gateway.http.requestTimeoutMs",
                        "must be at least 1",
                    ))
                }
                Some(ms) => Duration::from_millis(ms),
                None => DEFAULT_REQUEST_TIMEOUT,
            };
        let max_queued_per_session = u64_at(
            &http,
            "maxQueuedPerSession",
            "gateway.http.maxQueuedPerSession",
        )?
        .map_or(DEFAULT_MAX_QUEUED_PER_SESSION, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
        let allowed_origins = string_list(
            &http,
            "allowedOrigins",
            "gateway.http.allowedOrigins",
            "origin",
        )?
        .into_iter()
        .map(|o| o.trim_end_matches('/').to_owned())
        .collect::<Vec<_>>();
        for o in &allowed_origins {
            if !(o.starts_with("http://") || o.starts_with("https://")) {
                return Err(GatewayError::config(
                    "gateway.http.allowedOrigins",
                    format!("an origin is scheme://host[:port] (http://app.example:3000; no wildcard: list each one); found \"{o}\""),
                ));
            }
        }
        let allowed_hosts = string_list(
            &http,
            "allowedHosts",
            "gateway.http.allowedHosts",
            "host name",
        )?
        .into_iter()
        .map(|h| h.to_ascii_lowercase())
        .collect::<Vec<_>>();
        for h in &allowed_hosts {
            if h.is_empty() || h.contains('/') || h.contains(char::is_whitespace) {
                return Err(GatewayError::config(
                    "gateway.http.allowedHosts",
                    format!("a host is a name or name:port as clients put it in the Host header (gateway.example, gateway.example:18789, or * for any); found \"{h}\""),
                ));
            }
        }
        let shutdown_timeout = u64_at(&g, "shutdownTimeoutMs", "gateway.shutdownTimeoutMs")?
            .map_or(DEFAULT_SHUTDOWN_TIMEOUT, Duration::from_millis);
        let chat_completions = match http.pointer("/endpoints/chatCompletions/enabled") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(GatewayError::config(
                    "gateway.http.endpoints.chatCompletions.enabled",
                    format!("must be true or false; found {v}"),
                ))
            }
        };
        let trace = crate::trace::TraceSettings::from_gateway_section(&g)?;
        let transcript_roots = transcript_roots(&g)?;
        Ok(GatewayConfig {
            addr,
            bind_mode,
            token,
            max_body_bytes,
            request_timeout,
            max_queued_per_session,
            allowed_origins,
            allowed_hosts,
            shutdown_timeout,
            chat_completions,
            trace,
            transcript_roots,
        })
    }
}

/// `gateway.engineApi.transcriptRoots`: each an absolute path to a directory that exists, kept
/// resolved (symbolic links followed), so that a file is checked against where it really is.
fn transcript_roots(g: &Value) -> Result<Vec<std::path::PathBuf>> {
    const KEY: &str = "gateway.engineApi.transcriptRoots";
    let api = g.get("engineApi").cloned().unwrap_or(Value::Null);
    if !api.is_null() && !api.is_object() {
        return Err(GatewayError::config(
            "gateway.engineApi",
            format!("must be an object; found {api}"),
        ));
    }
    let mut roots = Vec::new();
    for root in string_list(&api, "transcriptRoots", KEY, "directory")? {
        let path = std::path::Path::new(&root);
        if !path.is_absolute() {
            return Err(GatewayError::config(
                KEY,
                format!("a root is an absolute directory path; found \"{root}\""),
            ));
        }
        let resolved = std::fs::canonicalize(path).map_err(|e| {
            GatewayError::config(KEY, format!("the root \"{root}\" cannot be used: {e}"))
        })?;
        if !resolved.is_dir() {
            return Err(GatewayError::config(
                KEY,
                format!("the root \"{root}\" is not a directory"),
            ));
        }
        roots.push(resolved);
    }
    Ok(roots)
}

impl crate::trace::TraceSettings {
    /// `gateway.trace` of `root` (the whole config): what `clawctx run` and `clawctx chat`
    /// trace with too, so a config that turns the trace off turns it off everywhere.
    pub fn from_config(root: &Value) -> Result<Self> {
        Self::from_gateway_section(&root.get("gateway").cloned().unwrap_or(Value::Null))
    }

    fn from_gateway_section(g: &Value) -> Result<Self> {
        let t = g.get("trace").cloned().unwrap_or(Value::Null);
        if !t.is_null() && !t.is_object() {
            return Err(GatewayError::config(
                "gateway.trace",
                format!("must be an object; found {t}"),
            ));
        }
        Ok(crate::trace::TraceSettings {
            enabled: match t.get("enabled") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(GatewayError::config(
                        "gateway.trace.enabled",
                        format!("must be true or false; found {v}"),
                    ))
                }
            },
            max_turns_per_session: match u64_at(
                &t,
                "maxTurnsPerSession",
                "gateway.trace.maxTurnsPerSession",
            )? {
                Some(0) => {
                    return Err(GatewayError::config(
                        "gateway.trace.maxTurnsPerSession",
                        "must be at least 1 (set gateway.trace.enabled: false to keep no trace)",
                    ))
                }
                Some(n) => n,
                None => crate::trace::DEFAULT_MAX_TURNS_PER_SESSION,
            },
            max_bytes: u64_at(&t, "maxBytes", "gateway.trace.maxBytes")?
                .unwrap_or(crate::trace::DEFAULT_MAX_BYTES),
        })
    }
}

/// `gateway.auth`: mode `none` means no token; mode `token` (or unset) takes the first of
/// `gateway.auth.token` (a string, or an OpenClaw SecretRef `{source: "env", id}`),
/// `gateway.auth.tokenEnv` (a variable name), `CLAWCTX_GATEWAY_TOKEN`. Errors name keys and
/// variables, never values.
fn resolve_token(g: &Value, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Token>> {
    let auth = g.get("auth").cloned().unwrap_or(Value::Null);
    if !auth.is_null() && !auth.is_object() {
        return Err(GatewayError::config("gateway.auth", "must be an object"));
    }
    let mode = str_at(&auth, "mode", "gateway.auth.mode")?;
    match mode.as_deref() {
        None | Some("token") => {}
        Some("none") => {
            tracing::warn!("Gateway auth mode=none explicitly configured; all gateway connections are unauthenticated.");
            return Ok(None);
        }
        Some(other @ ("password" | "trusted-proxy")) => {
            return Err(GatewayError::config(
                "gateway.auth.mode",
                format!(
                "\"{other}\" is not supported by clawctx; use \"token\" (or \"none\" on loopback)"
            ),
            ))
        }
        Some(other) => {
            return Err(GatewayError::config(
                "gateway.auth.mode",
                format!("must be \"token\" or \"none\"; found \"{other}\""),
            ))
        }
    }
    let from_var = |key: &str, var: &str| -> Result<Token> {
        match env(var) {
            Some(v) if !v.trim().is_empty() => Ok(Token::new(v.trim())),
            _ => Err(GatewayError::config(
                key,
                format!("names the environment variable {var}, which is not set or empty"),
            )),
        }
    };
    let token = match auth.get("token") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(GatewayError::config("gateway.auth.token", "must not be empty"))
        }
        Some(Value::String(s)) => Some(Token::new(s.trim())),
        Some(Value::Object(r)) => match (r.get("source").and_then(Value::as_str), r.get("id").and_then(Value::as_str)) {
            (Some("env"), Some(var)) => Some(from_var("gateway.auth.token", var)?),
            _ => {
                return Err(GatewayError::config(
                    "gateway.auth.token",
                    "a secret reference must be {\"source\": \"env\", \"id\": \"VARIABLE\"} (only env sources are supported)",
                ))
            }
        },
        Some(_) => {
            return Err(GatewayError::config(
                "gateway.auth.token",
                "must be a string or {\"source\": \"env\", \"id\": \"VARIABLE\"}",
            ))
        }
    };
    let token = match token {
        Some(t) => Some(t),
        None => match str_at(&auth, "tokenEnv", "gateway.auth.tokenEnv")? {
            Some(var) => Some(from_var("gateway.auth.tokenEnv", &var)?),
            None => env(TOKEN_ENV)
                .filter(|v| !v.trim().is_empty())
                .map(|v| Token::new(v.trim())),
        },
    };
    if token.is_none() && mode.as_deref() == Some("token") {
        return Err(GatewayError::config(
            "gateway.auth.mode",
            format!("is \"token\", but no token is configured (gateway.auth.token, gateway.auth.tokenEnv or {TOKEN_ENV})"),
        ));
    }
    Ok(token)
}

fn str_at(v: &Value, field: &str, key: &str) -> Result<Option<String>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(other) => Err(GatewayError::config(
            key,
            format!("must be a string; found {other}"),
        )),
    }
}

/// A list of strings at `v.field` (absent: empty); `what` names an item in the error.
fn string_list(v: &Value, field: &str, key: &str, what: &str) -> Result<Vec<String>> {
    let wrong = |found: &Value| {
        GatewayError::config(
            key,
            format!("must be a list of {what} strings; found {found}"),
        )
    };
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(|s| s.trim().to_owned())
                    .ok_or_else(|| wrong(i))
            })
            .collect(),
        Some(other) => Err(wrong(other)),
    }
}

fn u64_at(v: &Value, field: &str, key: &str) -> Result<Option<u64>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n.as_u64().map(Some).ok_or_else(|| {
            GatewayError::config(key, format!("must be a non-negative integer; found {n}"))
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_are_openclaws_loopback_on_18789_without_a_token() {
        let c = GatewayConfig::resolve(&json!({}), &Overrides::default(), &no_env).unwrap();
        assert_eq!(c.addr.to_string(), "127.0.0.1:18789");
        assert!(c.token.is_none());
        assert_eq!(c.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
        assert!(c.allowed_origins.is_empty());
        assert!(c.allowed_hosts.is_empty());
        assert!(c.transcript_roots.is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn transcript_roots_are_kept_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let c = GatewayConfig::resolve(
            &json!({"gateway": {"engineApi": {"transcriptRoots": [link.to_str().unwrap()]}}}),
            &Overrides::default(),
            &no_env,
        )
        .unwrap();
        assert_eq!(c.transcript_roots, [std::fs::canonicalize(&real).unwrap()]);
        let file = real.join("f.jsonl");
        std::fs::write(&file, "").unwrap();
        let err = GatewayConfig::resolve(
            &json!({"gateway": {"engineApi": {"transcriptRoots": [file.to_str().unwrap()]}}}),
            &Overrides::default(),
            &no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
    }

    #[test]
    fn allowed_hosts_and_origins_are_read_normalized() {
        let c = GatewayConfig::resolve(
            &json!({"gateway": {"http": {
                "allowedHosts": ["GW.Example", "gw.example:8443"],
                "allowedOrigins": ["https://app.example/"]
            }}}),
            &Overrides::default(),
            &no_env,
        )
        .unwrap();
        assert_eq!(c.allowed_hosts, ["gw.example", "gw.example:8443"]);
        assert_eq!(c.allowed_origins, ["https://app.example"]);
    }

    #[test]
    fn flag_beats_env_beats_config_for_the_port() {
        let cfg = json!({"gateway": {"port": 1111}});
        let env = |k: &str| (k == PORT_ENV).then(|| "2222".to_owned());
        assert_eq!(
            GatewayConfig::resolve(&cfg, &Overrides::default(), &no_env)
                .unwrap()
                .addr
                .port(),
            1111
        );
        assert_eq!(
            GatewayConfig::resolve(&cfg, &Overrides::default(), &env)
                .unwrap()
                .addr
                .port(),
            2222
        );
        let flags = Overrides {
            port: Some(3333),
            bind: None,
        };
        assert_eq!(
            GatewayConfig::resolve(&cfg, &flags, &env)
                .unwrap()
                .addr
                .port(),
            3333
        );
    }

    #[test]
    fn off_loopback_without_a_token_is_refused_and_with_one_accepted() {
        for cfg in [
            json!({"gateway": {"bind": "lan"}}),
            json!({"gateway": {"bind": "lan", "auth": {"mode": "none"}}}),
        ] {
            let err = GatewayConfig::resolve(&cfg, &Overrides::default(), &no_env).unwrap_err();
            assert!(
                err.to_string()
                    .contains("refusing to bind gateway to 0.0.0.0:18789 without auth"),
                "{err}"
            );
        }
        let flags = Overrides {
            port: None,
            bind: Some("0.0.0.0".into()),
        };
        assert!(matches!(
            GatewayConfig::resolve(&json!({}), &flags, &no_env),
            Err(GatewayError::NoAuthOffLoopback { .. })
        ));
        let c = GatewayConfig::resolve(
            &json!({"gateway": {"bind": "lan", "auth": {"token": "s3cret-token"}}}),
            &Overrides::default(),
            &no_env,
        )
        .unwrap();
        assert_eq!(c.token, Some(Token::new("s3cret-token")));
    }

    #[test]
    fn the_token_comes_from_the_variable_the_config_names_and_errors_never_show_it() {
        let env = |k: &str| (k == "MY_GW_TOKEN").then(|| "from-env-123".to_owned());
        let by_name = json!({"gateway": {"auth": {"tokenEnv": "MY_GW_TOKEN"}}});
        assert_eq!(
            GatewayConfig::resolve(&by_name, &Overrides::default(), &env)
                .unwrap()
                .token,
            Some(Token::new("from-env-123"))
        );
        let by_ref =
            json!({"gateway": {"auth": {"token": {"source": "env", "id": "MY_GW_TOKEN"}}}});
        assert_eq!(
            GatewayConfig::resolve(&by_ref, &Overrides::default(), &env)
                .unwrap()
                .token,
            Some(Token::new("from-env-123"))
        );
        let err = GatewayConfig::resolve(&by_name, &Overrides::default(), &no_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gateway.auth.tokenEnv") && err.contains("MY_GW_TOKEN"),
            "{err}"
        );
        let c = GatewayConfig::resolve(&by_name, &Overrides::default(), &env).unwrap();
        assert!(!format!("{c:?}").contains("from-env-123"));
        let fallback = |k: &str| (k == TOKEN_ENV).then(|| "fallback-tok".to_owned());
        assert_eq!(
            GatewayConfig::resolve(&json!({}), &Overrides::default(), &fallback)
                .unwrap()
                .token,
            Some(Token::new("fallback-tok"))
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (json!({"gateway": {"port": "x"}}), "gateway.port"),
            (json!({"gateway": {"bind": "localhost"}}), "gateway.bind"),
            (json!({"gateway": {"mode": "remote"}}), "gateway.mode=local"),
            (
                json!({"gateway": {"auth": {"mode": "password"}}}),
                "gateway.auth.mode",
            ),
            (
                json!({"gateway": {"auth": {"mode": "token"}}}),
                "no token is configured",
            ),
            (
                json!({"gateway": {"http": {"maxBodyBytes": -1}}}),
                "gateway.http.maxBodyBytes",
            ),
            (
                json!({"gateway": {"http": {"allowedOrigins": "*"}}}),
                "gateway.http.allowedOrigins",
            ),
            (
                json!({"gateway": {"http": {"allowedOrigins": ["app.example"]}}}),
                "gateway.http.allowedOrigins",
            ),
            (
                json!({"gateway": {"http": {"allowedOrigins": ["*"]}}}),
                "no wildcard",
            ),
            (
                json!({"gateway": {"http": {"allowedHosts": "gw.example"}}}),
                "gateway.http.allowedHosts",
            ),
            (
                json!({"gateway": {"http": {"allowedHosts": ["http://gw.example/"]}}}),
                "gateway.http.allowedHosts",
            ),
            (
                json!({"gateway": {"engineApi": {"transcriptRoots": ["relative/dir"]}}}),
                "gateway.engineApi.transcriptRoots",
            ),
            (
                json!({"gateway": {"engineApi": {"transcriptRoots": "/tmp"}}}),
                "gateway.engineApi.transcriptRoots",
            ),
            (
                json!({"gateway": {"engineApi": {"transcriptRoots": ["/nonexistent/clawctx-root"]}}}),
                "cannot be used",
            ),
        ];
        for (cfg, needle) in cases {
            let err = GatewayConfig::resolve(&cfg, &Overrides::default(), &no_env)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{cfg}: {err}");
        }
    }
}
