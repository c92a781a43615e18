//! Engine configuration, read from `plugins.entries.lossless.config` (camelCase keys).
//!
//! Every key has a default (see the crate docs for the table), unknown keys are ignored, and
//! values are sanity-clamped rather than rejected: a typo in one knob must not take the agent
//! down to `legacy`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which rankings recall fuses (`recallMethod`, see [`LosslessConfig::recall_method`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecallMethod {
    /// Words and meaning, fused by reciprocal rank.
    #[default]
    Hybrid,
    /// Words only.
    Lexical,
    /// Meaning only.
    Semantic,
}

/// The lossless engine's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LosslessConfig {
    /// Whether the engine stores anything at all.
    pub enabled: bool,
    /// SQLite file; default `<agentDir>/lossless.db`, else `$CLAWCTX_STATE_DIR/lossless.db`.
    #[serde(alias = "dbPath")]
    pub database_path: Option<String>,
    /// The store: a PostgreSQL URL (`postgres://…`) or a SQLite file path (then the same as
    /// `databasePath`). Shown only redacted (see [`DatabaseUrl`]).
    pub database: Option<DatabaseUrl>,
    /// The name of an environment variable holding the store's URL or path, so the password
    /// need not be written in the config; it wins over `database` and `databasePath`.
    pub database_env: Option<String>,
    /// Connections a PostgreSQL store keeps at most.
    pub pool_size: usize,
    /// What an acknowledged write survives on the SQLite store (see [`Durability`]).
    pub durability: Durability,
    /// Compact when frontier tokens exceed this fraction of the token budget.
    pub context_threshold: f64,
    /// Compaction continues until frontier tokens are at or below this fraction of the budget.
    pub low_water_ratio: f64,
    /// Threshold compaction is debt paid by background maintenance (`maintain` with
    /// `allowDeferredCompactionExecution`, after the reply) instead of inside
    /// `afterTurn`/`commitTurn`; a turn still compacts in the foreground when its frontier is
    /// over the whole budget. `false`: every turn compacts inline (the reply waits).
    pub background_compaction: bool,
    /// Budget used when the host gives none.
    pub default_token_budget: u64,
    /// Newest raw messages that are never compacted.
    pub fresh_tail_count: usize,
    /// Token cap of that fresh tail (the newest user message and what follows it are always
    /// in it); `0` = derived (a sixteenth of the budget), so that at a small budget compaction
    /// can bring the frontier down to the low-water mark instead of leaving the tail over it.
    pub fresh_tail_max_tokens: u64,
    /// Maximum source tokens of one leaf summary.
    pub leaf_chunk_tokens: u64,
    /// Target size of a leaf summary (capped at 35% of its source and a tenth of the budget,
    /// at least 192).
    pub leaf_target_tokens: u64,
    /// Target size of a condensed summary (capped at half its source and a tenth of the
    /// budget, at least 128).
    pub condensed_target_tokens: u64,
    /// Minimum raw messages in a leaf chunk (unless forced or under pressure).
    pub leaf_min_fanout: usize,
    /// Minimum contiguous same-depth summaries condensed into one.
    pub condensed_min_fanout: usize,
    /// Fanout used under pressure (still above the threshold after routine passes).
    pub condensed_min_fanout_hard: usize,
    /// Deepest summary routine condensation creates; `-1` = unlimited.
    pub incremental_max_depth: i64,
    /// Condense only when summaries outside the tail exceed this many tokens; `0` = derived
    /// (`min(leafChunkTokens, 25% of budget)`).
    pub summary_prefix_target_tokens: u64,
    /// Maximum summarize-and-commit rounds per compaction.
    pub max_compaction_rounds: usize,
    /// Independent summaries produced concurrently.
    pub summary_concurrency: usize,
    /// Fraction of the source's salient terms (capped at `maxTokens/16` terms) a summary keeps.
    pub min_salient_retention: f64,
    /// A summary may exceed its target by this factor before it is rejected.
    pub summary_max_overage_factor: f64,
    /// Spend guard: at most this many summarizer calls per window (then extractive only).
    pub summary_max_calls_per_window: u64,
    /// Spend guard window.
    pub summary_call_window_ms: u64,
    /// Consecutive summarizer failures that open the circuit breaker.
    pub circuit_breaker_threshold: u64,
    /// How long the breaker stays open (extractive summarizer only meanwhile).
    pub circuit_breaker_cooldown_ms: u64,
    /// Session-key globs stored nowhere (`*` within a `:` segment, `**` across).
    pub ignore_session_patterns: Vec<String>,
    /// Session-key globs served from the store but never written.
    #[serde(alias = "statelessSessionPatterns")]
    pub read_only_session_patterns: Vec<String>,
    /// On `/new`, summaries at or above this depth carry over; negative = none.
    pub new_session_retain_depth: i64,
    /// Default token cap of `lcm_expand`.
    pub max_expand_tokens: u64,
    /// SQLite busy timeout.
    pub busy_timeout_ms: u64,
    /// Rows a regex grep scans at most (newest first).
    pub grep_max_scan_rows: u64,
    /// Extra instructions passed to every summary request.
    pub custom_instructions: Option<String>,
    /// Share of the budget kept for stored messages that match the current prompt, quoted
    /// verbatim in a `<recalled>` block before it; `0` turns prompt recall off.
    pub prompt_recall_share: f64,
    /// Token cap of that block (the share applies below it).
    pub prompt_recall_max_tokens: u64,
    /// Messages quoted at most.
    pub prompt_recall_max_messages: usize,
    /// The embedding model for semantic recall ([`crate::core::semantic`]): `{"provider": "local",
    /// "model": "<dir or hub id>"}`, `{"provider": "openai", "baseUrl", "model", "apiKeyEnv"}`
    /// or `{"provider": "off"}` (see `clawctx_embed::EmbedSpec`); unset: `CLAWCTX_EMBED_MODEL`,
    /// else the default model directory when it holds one, else lexical recall only.
    pub embeddings: Option<Value>,
    /// Below this cosine with the prompt a message does not cue the `<recalled>` block by
    /// meaning (it may still by its words).
    pub semantic_min_score: f32,
    /// Which rankings the `<recalled>` block fuses when there is an embedding model: `hybrid`
    /// (words and meaning, the default), `lexical` (words only: no model is loaded) or
    /// `semantic` (meaning only). `clawctx eval` measures each.
    pub recall_method: RecallMethod,
    /// Share of the history budget (the budget less the recall reserve) dropped at once when
    /// the assembled context is full, so that the front of the prompt stays still for the
    /// next many turns and the provider's prompt cache keeps hitting (see
    /// [`crate::core::assemble`]); `0` drops only what no longer fits, moving the front every turn.
    /// Clamped to `0..=0.95`.
    pub cache_block_share: f64,
    /// Message texts of at least this many bytes are stored once per content; `0` = never.
    pub large_payload_bytes: usize,
    /// Large payloads older than this many days, once summarized, are replaced by a
    /// placeholder (on `maintain`); `None` = kept forever.
    pub payload_retention_days: Option<f64>,
    /// Why a key that chooses the store (`database`, `databaseEnv`, `databasePath`) did not
    /// read (a number where a string goes), naming it; [`Self::store_location`] refuses
    /// such a config. Every other key falls back to its default instead, but a store key
    /// cannot: several gateways would each write a local file while the operator believes
    /// they share one database. Not read from or written to the config.
    #[serde(skip)]
    pub store_key_error: Option<String>,
}

impl Default for LosslessConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            database_path: None,
            context_threshold: 0.8,
            low_water_ratio: 0.5,
            background_compaction: true,
            default_token_budget: 128_000,
            fresh_tail_count: 64,
            fresh_tail_max_tokens: 0,
            leaf_chunk_tokens: 20_000,
            leaf_target_tokens: 2_400,
            condensed_target_tokens: 2_000,
            leaf_min_fanout: 8,
            condensed_min_fanout: 4,
            condensed_min_fanout_hard: 2,
            incremental_max_depth: 3,
            summary_prefix_target_tokens: 0,
            max_compaction_rounds: 8,
            summary_concurrency: 4,
            min_salient_retention: 0.25,
            summary_max_overage_factor: 1.5,
            summary_max_calls_per_window: 240,
            summary_call_window_ms: 600_000,
            circuit_breaker_threshold: 3,
            circuit_breaker_cooldown_ms: 1_800_000,
            ignore_session_patterns: Vec::new(),
            read_only_session_patterns: Vec::new(),
            new_session_retain_depth: 2,
            max_expand_tokens: 4_000,
            busy_timeout_ms: 5_000,
            grep_max_scan_rows: 50_000,
            custom_instructions: None,
            prompt_recall_share: 0.25,
            prompt_recall_max_tokens: 6_000,
            prompt_recall_max_messages: 40,
            embeddings: None,
            semantic_min_score: DEFAULT_MIN_SCORE,
            recall_method: RecallMethod::Hybrid,
            cache_block_share: 0.5,
            large_payload_bytes: DEFAULT_LARGE_PAYLOAD_BYTES,
            payload_retention_days: None,
            database: None,
            database_env: None,
            pool_size: DEFAULT_POOL_SIZE,
            durability: Durability::Normal,
            store_key_error: None,
        }
    }
}

/// PostgreSQL connections a store keeps at most when the configuration names no number
/// (`poolSize`).
pub const DEFAULT_POOL_SIZE: usize = 16;
/// Message texts this large are stored once per content (`largePayloadBytes`).
pub const DEFAULT_LARGE_PAYLOAD_BYTES: usize = 8 * 1024;
/// Below this cosine a message does not cue the `<recalled>` block (`semanticMinScore`): as with
/// the lexical rule that only telling words cue it, a loose match would cost uncached tokens
/// every turn.
pub const DEFAULT_MIN_SCORE: f32 = 0.35;

/// The keys that choose the store, as written in the config (an alias included).
const STORE_KEYS: [&str; 4] = ["database", "databaseEnv", "databasePath", "dbPath"];

/// The config path of the engine's own keys, for errors.
const CONFIG_PATH: &str = "plugins.entries.lossless.config";

/// A database URL or path from the config. Its `Debug` form hides a URL's password, so the
/// config can be logged; the value itself is kept as given.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !crate::pg::connect::is_postgres_connection_string(&self.0) {
            return write!(f, "{:?}", self.0);
        }
        match crate::pg::connect::PgTarget::parse(&self.0) {
            Ok(t) => write!(f, "{:?}", t.redacted()),
            Err(_) => f.write_str("\"postgres://(not a valid connection string)\""),
        }
    }
}

/// What an acknowledged write survives on the SQLite store (`durability`). The store runs in
/// WAL mode either way; a process crash (SIGKILL, a panic, OOM) loses nothing acknowledged in
/// both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `PRAGMA synchronous = NORMAL`: the log is synced at checkpoints, not at every commit, so
    /// an operating-system crash or a power cut can lose the last commits before the newest
    /// checkpoint (never corrupt the store). The default: one `fsync` less per turn.
    #[default]
    Normal,
    /// `PRAGMA synchronous = FULL`: every commit syncs the log before it is acknowledged, so an
    /// acknowledged write also survives an OS crash or power cut.
    Full,
}

impl Durability {
    /// The `PRAGMA synchronous` value.
    pub fn synchronous(self) -> &'static str {
        match self {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        }
    }
}

/// Where the configured store is.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreLocation {
    /// A SQLite file (`None`: the default path, which depends on the host).
    Sqlite(Option<std::path::PathBuf>),
    /// A PostgreSQL database, by its URL (which holds the password: never print it; show
    /// [`crate::pg::connect::PgTarget::redacted`]).
    Postgres(String),
}

impl LosslessConfig {
    /// Where the store is: `databaseEnv`'s variable, else `database`, else `databasePath`,
    /// else the default SQLite file. A PostgreSQL database is named by a `postgres://` URL or
    /// libpq's `key=value` form (`host=db.example dbname=lcm`). An error names the key: a
    /// `databaseEnv` variable that is not set, a store key of the wrong type, a connection
    /// string that does not parse (without its password).
    pub fn store_location(&self) -> crate::error::Result<StoreLocation> {
        if let Some(e) = &self.store_key_error {
            return Err(crate::error::LosslessError::InvalidInput(e.clone()));
        }
        let (given, key) = match &self.database_env {
            Some(var) if !var.trim().is_empty() => match std::env::var(var.trim()) {
                Ok(v) if !v.trim().is_empty() => (
                    Some(v),
                    format!(
                        "{CONFIG_PATH}.databaseEnv (the environment variable {})",
                        var.trim()
                    ),
                ),
                _ => {
                    return Err(crate::error::LosslessError::InvalidInput(format!(
                    "{CONFIG_PATH}.databaseEnv names the environment variable {}, which is not set",
                    var.trim()
                )))
                }
            },
            _ => (
                self.database.as_ref().map(|d| d.0.clone()),
                format!("{CONFIG_PATH}.database"),
            ),
        };
        Ok(match given {
            Some(v) if crate::pg::connect::is_postgres_connection_string(&v) => {
                if let Err(e) = crate::pg::connect::PgTarget::parse(&v) {
                    return Err(crate::error::LosslessError::InvalidInput(format!(
                        "{key}: {e}"
                    )));
                }
                StoreLocation::Postgres(v)
            }
            Some(v) if !v.trim().is_empty() => StoreLocation::Sqlite(Some(v.into())),
            _ => StoreLocation::Sqlite(self.database_path.clone().map(Into::into)),
        })
    }

    /// Reads `plugins.entries.lossless.config` from a whole host config (defaults when absent).
    pub fn from_host_config(root: &Value) -> Self {
        root.pointer("/plugins/entries/lossless/config")
            .map(Self::from_value)
            .unwrap_or_default()
    }

    /// Reads the engine's own config object; invalid values fall back to defaults key by key.
    pub fn from_value(v: &Value) -> Self {
        let mut cfg: Self = match serde_json::from_value(v.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    "lossless: config did not parse as a whole ({e}); reading keys one by one"
                );
                let mut base = serde_json::to_value(Self::default()).unwrap_or(Value::Null);
                let mut store_key_error = None;
                if let (Value::Object(base_map), Value::Object(given)) = (&mut base, v) {
                    for (k, val) in given {
                        let mut probe = base_map.clone();
                        probe.insert(k.clone(), val.clone());
                        match serde_json::from_value::<Self>(Value::Object(probe.clone())) {
                            Ok(_) => *base_map = probe,
                            Err(_) if STORE_KEYS.contains(&k.as_str()) => {
                                store_key_error.get_or_insert_with(|| {
                                    format!(
                                        "{CONFIG_PATH}.{k} must be a string (a postgres:// URL, \
                                         a libpq key=value connection string or a file path), \
                                         not {}",
                                        json_kind(val)
                                    )
                                });
                            }
                            Err(_) => {}
                        }
                    }
                }
                let mut cfg: Self = serde_json::from_value(base).unwrap_or_default();
                cfg.store_key_error = store_key_error;
                cfg
            }
        };
        cfg.clamp();
        cfg
    }

    fn clamp(&mut self) {
        self.context_threshold = clamp_f(self.context_threshold, 0.05, 1.0, 0.8);
        self.low_water_ratio = clamp_f(self.low_water_ratio, 0.01, self.context_threshold, 0.5);
        self.min_salient_retention = clamp_f(self.min_salient_retention, 0.0, 1.0, 0.25);
        self.summary_max_overage_factor = clamp_f(self.summary_max_overage_factor, 1.0, 10.0, 1.5);
        self.default_token_budget = self.default_token_budget.max(1_000);
        self.leaf_chunk_tokens = self.leaf_chunk_tokens.max(256);
        self.leaf_target_tokens = self.leaf_target_tokens.max(64);
        self.condensed_target_tokens = self.condensed_target_tokens.max(64);
        self.leaf_min_fanout = self.leaf_min_fanout.max(1);
        self.condensed_min_fanout = self.condensed_min_fanout.max(2);
        self.condensed_min_fanout_hard = self
            .condensed_min_fanout_hard
            .clamp(2, self.condensed_min_fanout);
        self.max_compaction_rounds = self.max_compaction_rounds.clamp(1, 64);
        self.summary_concurrency = self.summary_concurrency.clamp(1, 32);
        self.prompt_recall_share = clamp_f(self.prompt_recall_share, 0.0, 0.5, 0.25);
        self.cache_block_share = clamp_f(self.cache_block_share, 0.0, 0.95, 0.5);
        self.prompt_recall_max_messages = self.prompt_recall_max_messages.min(200);
        self.payload_retention_days = self
            .payload_retention_days
            .filter(|d| d.is_finite() && *d >= 0.0);
        self.pool_size = self.pool_size.clamp(1, 256);
    }

    /// Tokens kept for prompt recall at `budget` (0 = off). Fixed for a budget, whatever the
    /// prompt finds, so the rest of the context starts at the same place every turn.
    pub fn prompt_recall_reserve(&self, budget: u64) -> u64 {
        if self.prompt_recall_max_messages == 0 {
            return 0;
        }
        ((self.prompt_recall_share * budget as f64).floor() as u64)
            .min(self.prompt_recall_max_tokens)
    }

    /// Tokens the fresh tail holds at most at `budget` (see `fresh_tail_max_tokens`).
    pub fn fresh_tail_tokens(&self, budget: u64) -> u64 {
        if self.fresh_tail_max_tokens > 0 {
            self.fresh_tail_max_tokens
        } else {
            budget / 16
        }
    }

    /// The threshold in tokens for `budget`.
    pub fn threshold_tokens(&self, budget: u64) -> u64 {
        (self.context_threshold * budget as f64).floor() as u64
    }

    /// The low-water mark in tokens for `budget`.
    pub fn low_water_tokens(&self, budget: u64) -> u64 {
        (self.low_water_ratio * budget as f64).floor() as u64
    }

    /// Summary tokens outside the tail above which routine condensation runs.
    pub fn prefix_target_tokens(&self, budget: u64) -> u64 {
        if self.summary_prefix_target_tokens > 0 {
            self.summary_prefix_target_tokens
        } else {
            self.leaf_chunk_tokens
                .min(budget / 4)
                .max(self.condensed_target_tokens)
        }
    }
}

/// What kind of JSON value `v` is, for errors.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn clamp_f(v: f64, lo: f64, hi: f64, dflt: f64) -> f64 {
    if v.is_finite() {
        v.clamp(lo, hi)
    } else {
        dflt
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_store_is_chosen_by_url_env_or_path() {
        let cfg = LosslessConfig::from_value(&serde_json::json!({"databasePath": "/data/a.db"}));
        assert_eq!(
            cfg.store_location().unwrap(),
            StoreLocation::Sqlite(Some("/data/a.db".into()))
        );
        let cfg = LosslessConfig::from_value(&serde_json::json!({
            "databasePath": "/data/a.db", "database": "postgres://u:secret-pw@db.example:6543/lcm"
        }));
        assert_eq!(
            cfg.store_location().unwrap(),
            StoreLocation::Postgres("postgres://u:secret-pw@db.example:6543/lcm".into())
        );
        // The password never shows in the config's debug form (logs).
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("secret-pw"), "{shown}");
        assert!(shown.contains("db.example:6543"), "{shown}");
        let cfg = LosslessConfig::from_value(
            &serde_json::json!({"databaseEnv": "CLAWCTX_TEST_UNSET_VAR_4242"}),
        );
        let err = cfg.store_location().unwrap_err().to_string();
        assert!(
            err.contains("CLAWCTX_TEST_UNSET_VAR_4242") && err.contains("not set"),
            "{err}"
        );
        assert_eq!(
            LosslessConfig::default().store_location().unwrap(),
            StoreLocation::Sqlite(None)
        );
    }

    #[test]
    fn a_libpq_key_value_string_is_postgres_not_a_file() {
        let conn = "host=db.example port=6543 user=lcm password=secret-pw dbname=lcm";
        let cfg = LosslessConfig::from_value(&serde_json::json!({"database": conn}));
        assert_eq!(
            cfg.store_location().unwrap(),
            StoreLocation::Postgres(conn.into())
        );
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("secret-pw"), "{shown}");
        assert!(shown.contains("db.example:6543"), "{shown}");
        // One that does not parse is an error naming the key, not a file of that name.
        let cfg = LosslessConfig::from_value(
            &serde_json::json!({"database": "host=db.example password=secret-pw nosuchkey=1"}),
        );
        let err = cfg.store_location().unwrap_err().to_string();
        assert!(
            err.contains("plugins.entries.lossless.config.database:"),
            "{err}"
        );
        assert!(err.contains("nosuchkey"), "{err}");
        assert!(!err.contains("secret-pw"), "{err}");
        // A file path with an '=' further on is still a file.
        let cfg = LosslessConfig::from_value(&serde_json::json!({"database": "/data/a=b.db"}));
        assert_eq!(
            cfg.store_location().unwrap(),
            StoreLocation::Sqlite(Some("/data/a=b.db".into()))
        );
    }

    #[test]
    fn a_store_key_of_the_wrong_type_is_an_error_naming_it() {
        for (key, value, kind) in [
            ("database", serde_json::json!(5432), "a number"),
            (
                "database",
                serde_json::json!({"url": "postgres://h/d"}),
                "an object",
            ),
            ("databaseEnv", serde_json::json!(true), "a boolean"),
            ("databasePath", serde_json::json!(["a.db"]), "an array"),
        ] {
            let cfg = LosslessConfig::from_value(&serde_json::json!({
                key: value, "freshTailCount": 12
            }));
            // Other keys still read.
            assert_eq!(cfg.fresh_tail_count, 12);
            let err = cfg.store_location().unwrap_err().to_string();
            assert!(
                err.contains(&format!(
                    "plugins.entries.lossless.config.{key} must be a string"
                )),
                "{key}: {err}"
            );
            assert!(err.contains(kind), "{key}: {err}");
        }
        // A wrong type elsewhere still falls back to its default, as before.
        let cfg = LosslessConfig::from_value(&serde_json::json!({"freshTailCount": "many"}));
        assert_eq!(cfg.fresh_tail_count, 64);
        assert!(cfg.store_location().is_ok());
    }
}
