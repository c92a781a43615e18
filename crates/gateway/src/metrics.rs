//! Prometheus metrics at `/metrics` (OpenMetrics text, through `prometheus-client`).
//!
//! One registry per gateway (not a process-global recorder), so several gateways in one test
//! process never mix their counts. What an operator needs to see that the gateway works and
//! where time goes: requests by route and status, turns by outcome with their wall time and
//! the parts spent in the model, in the engine and in the gateway itself (the turn less the
//! model and the engine), engine-API calls by method with their latency (assemble among them), errors by
//! kind, turns in flight, and the engines quarantined in this process (read from the registry
//! at scrape time).
//!
//! Also where the context engine's time goes: the latency of `assemble` and of compactions, in
//! chat turns and through the engine API alike (`source`); summarizer calls, failures and
//! latency (every summary made in this process, by the runtime's compaction or inside the
//! lossless engine, seen through `clawctx_summarize::observe`: process-wide, unlike the rest);
//! the engine's own compaction passes (the lossless engine compacts inside `afterTurn` and
//! `commitTurn`, out of the host's sight; reported through the same module), counted by
//! outcome and timed; requests refused before routing (a foreign `Host` or `Origin`);
//! and the size of the stores on disk (the lossless database with its write-ahead log, the
//! gateway's transcripts), measured at scrape time.
//!
//! And whether the provider's prompt cache hits, per session: the prompt tokens of each
//! session's model calls and the part the provider served from its cache (`cacheRead` of the
//! turn's usage, from OpenAI's `prompt_tokens_details.cached_tokens` or Anthropic's
//! `cache_read_input_tokens`), with their ratio as a gauge. A context engine that rewrites the
//! front of the prompt every turn shows here as a low ratio. The [`SESSION_SERIES_MAX`]
//! sessions that most recently made a model call have a series each; when another one comes,
//! the least recently active one's series is removed and its tokens are added to the series
//! `session="(other)"`, so the label set stays bounded however many sessions a long-running
//! gateway serves, and the sum over `session` is still every prompt token since the start. The
//! dashboard's session view shows a session's own figures, kept for the
//! [`SESSION_FIGURES_MAX`] most recently active sessions.
//! The tokens the provider wrote to its cache (`cacheWrite`, Anthropic's
//! `cache_creation_input_tokens`, billed above the input price) are counted beside them.
//!
//! And what OpenAI and Anthropic would cache of the same model calls under their documented
//! rules, whichever provider the gateway talks to (`rule`: `openai`, `anthropic`; the runtime's
//! `TurnOutcome::modelled_cache`, from `clawctx_model::prefix_cache`): so a gateway in front of
//! a local model that reports no cache still shows whether its context engine would keep a
//! paid provider's cache warm.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::ContextEngineRegistry;
use clawctx_runtime::TurnOutcome;
use clawctx_summarize::observe::{self, CompactionObserverGuard, ObserverGuard};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `route`, `method`, `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The matched route (`/v1/chat/completions`), or `unmatched`.
    pub route: String,
    /// HTTP method.
    pub method: String,
    /// Status code.
    pub status: u16,
}

/// `outcome`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok`, `error`, `aborted`, or `rejected` (the request's own mistake found by the
    /// runtime, such as a tool result for no open call: a 400, not a failure).
    pub outcome: String,
}

/// `method`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// Engine method (`assemble`, `ingest`, ...).
    pub method: String,
}

/// `source`: `turn` (a chat turn) or `engine_api`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// Where the call came from.
    pub source: String,
}

/// `source` and `trigger` of a compaction.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompactionLabels {
    /// `turn` or `engine_api`.
    pub source: String,
    /// `auto`, `overflow`, `preflight` (turns) or `api`.
    pub trigger: String,
}

/// `engine` and `outcome` of an engine's own compaction pass.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineCompactionLabels {
    /// The engine (`lossless`).
    pub engine: String,
    /// `ok` or `error`.
    pub outcome: String,
}

/// `engine`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineLabels {
    /// The engine (`lossless`).
    pub engine: String,
}

/// Sessions with a series of their own in the per-session prompt-cache metrics (see the
/// module docs); the rest are summed in `session="(other)"`.
pub const SESSION_SERIES_MAX: usize = 100;

/// The label of the series the sessions past [`SESSION_SERIES_MAX`] are summed in.
pub const OTHER_SESSIONS: &str = "(other)";

/// Sessions whose prompt-cache figures the dashboard can show (the most recently active).
pub const SESSION_FIGURES_MAX: usize = 10_000;

/// The per-session prompt-cache figures: each session's own (for the dashboard), which
/// sessions have a series, and when each was last active.
#[derive(Debug, Default)]
struct SessionFigures {
    /// Session key → its figures and the tick of its last model call.
    figures: std::collections::HashMap<String, (SessionCache, u64)>,
    /// Session key → the tick of its last model call, for the sessions with a series.
    series: std::collections::HashMap<String, u64>,
    /// The figures summed in `session="(other)"`.
    other: SessionCache,
    /// Counts model calls recorded (the recency order).
    tick: u64,
}

/// `session`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionLabels {
    /// The session key.
    pub session: String,
}

/// `rule`: `openai` or `anthropic`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// The provider whose documented caching rule was applied.
    pub rule: String,
}

/// A session's prompt-cache figures (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCache {
    /// Prompt tokens of the session's model calls (cached ones included).
    pub prompt_tokens: u64,
    /// Of those, the tokens the provider served from its cache.
    pub cached_tokens: u64,
    /// Tokens the provider wrote to its cache (`cacheWrite`).
    pub cache_write_tokens: u64,
}

impl SessionCache {
    /// `cached_tokens / prompt_tokens` (`None` before any prompt token).
    pub fn hit_ratio(&self) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }
}

/// `reason` a request was refused before it reached a route.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `host` (not a loopback name nor in `gateway.http.allowedHosts`) or `origin` (another
    /// site's page, not in `gateway.http.allowedOrigins`).
    pub reason: String,
}

/// `summarizer`: `llm` or `extractive`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SummarizerLabels {
    /// Which summarizer.
    pub summarizer: String,
}

/// `store`: `lossless_db`, `transcripts` or `turn_trace`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// Which store.
    pub store: String,
}

/// `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `http_5xx`, `turn`, `engine`, `timeout`, `busy`.
    pub kind: String,
}

/// Builds the latency histograms of a [`Family`].
#[derive(Clone, Debug)]
pub struct LatencyBuckets;

impl MetricConstructor<Histogram> for LatencyBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(latency_buckets())
    }
}

/// 100 µs to ~100 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 2.0, 21)
}

/// The gateway's metrics.
pub struct Metrics {
    registry: Registry,
    engines: Option<Arc<ContextEngineRegistry>>,
    /// HTTP requests answered.
    pub requests: Family<RequestLabels, Counter>,
    /// Turns run, by outcome.
    pub turns: Family<OutcomeLabels, Counter>,
    /// Wall time of a turn.
    pub turn_seconds: Histogram,
    /// Time a turn spent waiting for the model (every model call of the turn).
    pub turn_model_seconds: Histogram,
    /// Time a turn spent in the engine (assemble, delivery, compaction, maintain).
    pub turn_engine_seconds: Histogram,
    /// Time a turn spent in the gateway and runtime themselves (wall − model − engine).
    pub turn_host_seconds: Histogram,
    /// Engine-API calls, by method.
    pub engine_calls: Family<MethodLabels, Counter>,
    /// Engine-API call latency, by method.
    pub engine_call_seconds: Family<MethodLabels, Histogram, LatencyBuckets>,
    /// `assemble` latency, in turns and through the engine API.
    pub assemble_seconds: Family<SourceLabels, Histogram, LatencyBuckets>,
    /// Compaction latency, in turns and through the engine API.
    pub compaction_seconds: Family<CompactionLabels, Histogram, LatencyBuckets>,
    /// Keeps the compaction observer for as long as the metrics live.
    _compactions: CompactionObserverGuard,
    /// Requests refused before routing, by reason.
    pub refused_requests: Family<ReasonLabels, Counter>,
    /// Bytes on disk, by store (set at scrape time).
    pub store_bytes: Family<StoreLabels, Gauge>,
    /// The stores measured.
    stores: Vec<(&'static str, PathBuf)>,
    /// Keeps the summarizer observer for as long as the metrics live.
    _summaries: ObserverGuard,
    /// Errors, by kind.
    pub errors: Family<KindLabels, Counter>,
    /// Turns running now.
    pub turns_in_flight: Gauge,
    /// Requests waiting for a busy session's turn.
    pub requests_waiting: Gauge,
    /// Engines quarantined in this process (set at scrape time).
    pub quarantines: Gauge,
    /// Prompt tokens of each session's model calls.
    pub session_prompt_tokens: Family<SessionLabels, Counter>,
    /// Of those, the tokens served from the provider's prompt cache.
    pub session_cached_tokens: Family<SessionLabels, Counter>,
    /// Tokens each session's model calls wrote to the provider's prompt cache.
    pub session_cache_write_tokens: Family<SessionLabels, Counter>,
    /// `cached / prompt` tokens of each session.
    pub session_cache_hit_ratio: Family<SessionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Prompt tokens of the model calls, counted as each rule's provider would.
    pub modelled_prompt_tokens: Family<RuleLabels, Counter>,
    /// Of those, what each rule's provider would serve from its cache.
    pub modelled_cached_tokens: Family<RuleLabels, Counter>,
    /// What each rule's provider would write to its cache (Anthropic's cache creation).
    pub modelled_cache_write_tokens: Family<RuleLabels, Counter>,
    /// The same figures for the dashboard, by session key, and the series' bookkeeping.
    session_cache: std::sync::Mutex<SessionFigures>,
    /// Per-turn traces by outcome (`written`, `failed`, `dropped`), read from the trace
    /// writer's own counters at scrape time.
    pub trace_turns: Family<OutcomeLabels, Counter>,
    /// The trace writer whose counters `trace_turns` shows.
    tracer: Option<crate::trace::Tracer>,
}

impl Metrics {
    /// A fresh registry; `engines` is read for the quarantine gauge at each scrape.
    pub fn new(engines: Option<Arc<ContextEngineRegistry>>) -> Self {
        let mut registry = Registry::with_prefix("clawctx_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route, method and status",
            requests.clone(),
        );
        let turns = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "turns",
            "Agent turns run through /v1/chat/completions, by outcome",
            turns.clone(),
        );
        let turn_seconds = Histogram::new(latency_buckets());
        registry.register("turn_seconds", "Wall time of a turn", turn_seconds.clone());
        let turn_model_seconds = Histogram::new(latency_buckets());
        registry.register(
            "turn_model_seconds",
            "Time a turn spent waiting for the model (all its model calls; turns that ended ok)",
            turn_model_seconds.clone(),
        );
        let turn_engine_seconds = Histogram::new(latency_buckets());
        registry.register(
            "turn_engine_seconds",
            "Time a turn spent inside the context engine (assemble, delivery, compaction, maintain)",
            turn_engine_seconds.clone(),
        );
        let turn_host_seconds = Histogram::new(latency_buckets());
        registry.register(
            "turn_host_seconds",
            "Time a turn spent in the gateway and runtime themselves (wall time less model and engine)",
            turn_host_seconds.clone(),
        );
        let engine_calls = Family::<MethodLabels, Counter>::default();
        registry.register(
            "engine_calls",
            "Engine API calls, by method",
            engine_calls.clone(),
        );
        let engine_call_seconds =
            Family::<MethodLabels, Histogram, LatencyBuckets>::new_with_constructor(LatencyBuckets);
        registry.register(
            "engine_call_seconds",
            "Engine API call latency, by method",
            engine_call_seconds.clone(),
        );
        let assemble_seconds =
            Family::<SourceLabels, Histogram, LatencyBuckets>::new_with_constructor(LatencyBuckets);
        registry.register(
            "assemble_seconds",
            "Latency of the engine's assemble, in chat turns (source=turn) and through the engine API (source=engine_api)",
            assemble_seconds.clone(),
        );
        let compaction_seconds =
            Family::<CompactionLabels, Histogram, LatencyBuckets>::new_with_constructor(
                LatencyBuckets,
            );
        registry.register(
            "compaction_seconds",
            "Latency of compactions the host ran or asked for, in chat turns and through the engine API",
            compaction_seconds.clone(),
        );
        let summarizer_calls = Family::<SummarizerLabels, Counter>::default();
        registry.register(
            "summarizer_calls",
            "Summaries asked of a summarizer in this process",
            summarizer_calls.clone(),
        );
        let summarizer_failures = Family::<SummarizerLabels, Counter>::default();
        registry.register(
            "summarizer_failures",
            "Summarizer calls that produced no summary (an LLM failure falls back to the extractive summarizer)",
            summarizer_failures.clone(),
        );
        let summarizer_seconds =
            Family::<SummarizerLabels, Histogram, LatencyBuckets>::new_with_constructor(
                LatencyBuckets,
            );
        registry.register(
            "summarizer_seconds",
            "Summarizer latency",
            summarizer_seconds.clone(),
        );
        let engine_compactions = Family::<EngineCompactionLabels, Counter>::default();
        registry.register(
            "engine_compactions",
            "Compaction passes engines ran themselves or were asked for (the lossless engine's threshold compactions inside afterTurn/commitTurn included), by engine and outcome",
            engine_compactions.clone(),
        );
        let engine_compaction_seconds =
            Family::<EngineLabels, Histogram, LatencyBuckets>::new_with_constructor(LatencyBuckets);
        registry.register(
            "engine_compaction_seconds",
            "Duration of engines' compaction passes, summaries included",
            engine_compaction_seconds.clone(),
        );
        let compactions = {
            let (count, seconds) = (
                engine_compactions.clone(),
                engine_compaction_seconds.clone(),
            );
            observe::add_compaction_observer(move |c| {
                count
                    .get_or_create(&EngineCompactionLabels {
                        engine: c.engine.to_owned(),
                        outcome: if c.ok { "ok" } else { "error" }.to_owned(),
                    })
                    .inc();
                seconds
                    .get_or_create(&EngineLabels {
                        engine: c.engine.to_owned(),
                    })
                    .observe(c.took.as_secs_f64());
            })
        };
        let refused_requests = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "refused_requests",
            "Requests refused before routing: a Host that is not a loopback name nor in gateway.http.allowedHosts (host), another site's Origin not in gateway.http.allowedOrigins (origin)",
            refused_requests.clone(),
        );
        for reason in ["host", "origin"] {
            let _ = refused_requests.get_or_create(&ReasonLabels {
                reason: reason.into(),
            });
        }
        let store_bytes = Family::<StoreLabels, Gauge>::default();
        registry.register(
            "store_bytes",
            "Bytes on disk: the lossless database with its write-ahead log (lossless_db), the gateway's transcripts (transcripts)",
            store_bytes.clone(),
        );
        // The series an operator looks for exist from the start, at zero.
        for source in ["turn", "engine_api"] {
            let _ = assemble_seconds.get_or_create(&SourceLabels {
                source: source.into(),
            });
        }
        for summarizer in ["llm", "extractive"] {
            let labels = SummarizerLabels {
                summarizer: summarizer.into(),
            };
            let _ = summarizer_calls.get_or_create(&labels);
            let _ = summarizer_failures.get_or_create(&labels);
        }
        let summaries = {
            let (calls, failures, seconds) = (
                summarizer_calls.clone(),
                summarizer_failures.clone(),
                summarizer_seconds.clone(),
            );
            observe::add_observer(move |c| {
                let labels = SummarizerLabels {
                    summarizer: c.summarizer.to_owned(),
                };
                calls.get_or_create(&labels).inc();
                if !c.ok {
                    failures.get_or_create(&labels).inc();
                }
                seconds.get_or_create(&labels).observe(c.took.as_secs_f64());
            })
        };
        let errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "errors",
            "Errors, by kind (http_5xx, turn, engine, timeout, busy)",
            errors.clone(),
        );
        let turns_in_flight = Gauge::default();
        registry.register(
            "turns_in_flight",
            "Turns running now",
            turns_in_flight.clone(),
        );
        let requests_waiting = Gauge::default();
        registry.register(
            "requests_waiting",
            "Requests waiting for a busy session's turn",
            requests_waiting.clone(),
        );
        let quarantines = Gauge::default();
        registry.register(
            "quarantined_engines",
            "Engines quarantined in this process (legacy serves for them)",
            quarantines.clone(),
        );
        let session_prompt_tokens = Family::<SessionLabels, Counter>::default();
        registry.register(
            "session_prompt_tokens",
            "Prompt tokens of each session's model calls, cached ones included",
            session_prompt_tokens.clone(),
        );
        let session_cached_tokens = Family::<SessionLabels, Counter>::default();
        registry.register(
            "session_cached_prompt_tokens",
            "Prompt tokens of each session's model calls that the provider served from its prompt cache",
            session_cached_tokens.clone(),
        );
        let session_cache_write_tokens = Family::<SessionLabels, Counter>::default();
        registry.register(
            "session_cache_write_prompt_tokens",
            "Prompt tokens of each session's model calls that the provider wrote to its prompt cache (Anthropic's cache_creation_input_tokens)",
            session_cache_write_tokens.clone(),
        );
        let modelled_prompt_tokens = Family::<RuleLabels, Counter>::default();
        registry.register(
            "modelled_prompt_tokens",
            "Prompt tokens of all model calls, counted (o200k) on the request body each rule's provider would receive",
            modelled_prompt_tokens.clone(),
        );
        let modelled_cached_tokens = Family::<RuleLabels, Counter>::default();
        registry.register(
            "modelled_cached_prompt_tokens",
            "Prompt tokens OpenAI (rule=openai: prefixes of 1,024 tokens and more, 128-token steps, 5 minutes idle) or Anthropic (rule=anthropic: at the client's cache_control breakpoints, 5-minute lifetime) would serve from its prompt cache",
            modelled_cached_tokens.clone(),
        );
        let modelled_cache_write_tokens = Family::<RuleLabels, Counter>::default();
        registry.register(
            "modelled_cache_write_prompt_tokens",
            "Prompt tokens the rule's provider would write to its prompt cache (Anthropic's cache creation; OpenAI bills none)",
            modelled_cache_write_tokens.clone(),
        );
        for rule in ["openai", "anthropic"] {
            let labels = RuleLabels { rule: rule.into() };
            let _ = modelled_prompt_tokens.get_or_create(&labels);
            let _ = modelled_cached_tokens.get_or_create(&labels);
            let _ = modelled_cache_write_tokens.get_or_create(&labels);
        }
        let session_cache_hit_ratio =
            Family::<SessionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "session_cache_hit_ratio",
            "Share of each session's prompt tokens served from the provider's prompt cache",
            session_cache_hit_ratio.clone(),
        );
        let trace_turns = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "trace_turns",
            "Per-turn traces by outcome: written to the state dir, failed to write (logged), or dropped because the writer was behind",
            trace_turns.clone(),
        );
        Metrics {
            registry,
            engines,
            trace_turns,
            tracer: None,
            requests,
            turns,
            turn_seconds,
            turn_model_seconds,
            turn_engine_seconds,
            turn_host_seconds,
            engine_calls,
            engine_call_seconds,
            assemble_seconds,
            compaction_seconds,
            _compactions: compactions,
            refused_requests,
            store_bytes,
            stores: Vec::new(),
            _summaries: summaries,
            errors,
            turns_in_flight,
            requests_waiting,
            quarantines,
            session_prompt_tokens,
            session_cached_tokens,
            session_cache_write_tokens,
            session_cache_hit_ratio,
            modelled_prompt_tokens,
            modelled_cached_tokens,
            modelled_cache_write_tokens,
            session_cache: Default::default(),
        }
    }

    /// Records the prompt cache figures of a finished turn's model calls.
    pub fn session_usage(&self, session: &str, usage: &clawctx_protocol::Usage) {
        let prompt = usage.input + usage.cache_read + usage.cache_write;
        if prompt == 0 {
            return;
        }
        let mut state = self.session_cache.lock().unwrap_or_else(|e| e.into_inner());
        state.tick += 1;
        let tick = state.tick;
        if !state.figures.contains_key(session) && state.figures.len() >= SESSION_FIGURES_MAX {
            if let Some(oldest) = least_recent(state.figures.iter().map(|(k, (_, t))| (k, *t))) {
                state.figures.remove(&oldest);
            }
        }
        let entry = state.figures.entry(session.to_owned()).or_default();
        entry.0.prompt_tokens += prompt;
        entry.0.cached_tokens += usage.cache_read;
        entry.0.cache_write_tokens += usage.cache_write;
        entry.1 = tick;
        let ratio = entry.0.hit_ratio();
        if !state.series.contains_key(session) && state.series.len() >= SESSION_SERIES_MAX {
            if let Some(oldest) = least_recent(state.series.iter().map(|(k, t)| (k, *t))) {
                state.series.remove(&oldest);
                self.fold_into_other(&mut state, &oldest);
            }
        }
        state.series.insert(session.to_owned(), tick);
        let labels = SessionLabels {
            session: session.to_owned(),
        };
        self.session_prompt_tokens
            .get_or_create(&labels)
            .inc_by(prompt);
        self.session_cached_tokens
            .get_or_create(&labels)
            .inc_by(usage.cache_read);
        self.session_cache_write_tokens
            .get_or_create(&labels)
            .inc_by(usage.cache_write);
        if let Some(r) = ratio {
            self.session_cache_hit_ratio.get_or_create(&labels).set(r);
        }
    }

    /// Removes `session`'s series and adds what they counted to `session="(other)"`.
    fn fold_into_other(&self, state: &mut SessionFigures, session: &str) {
        let labels = SessionLabels {
            session: session.to_owned(),
        };
        let prompt = self.session_prompt_tokens.get_or_create(&labels).get();
        let cached = self.session_cached_tokens.get_or_create(&labels).get();
        let written = self.session_cache_write_tokens.get_or_create(&labels).get();
        self.session_prompt_tokens.remove(&labels);
        self.session_cached_tokens.remove(&labels);
        self.session_cache_write_tokens.remove(&labels);
        self.session_cache_hit_ratio.remove(&labels);
        state.other.prompt_tokens += prompt;
        state.other.cached_tokens += cached;
        state.other.cache_write_tokens += written;
        let other = SessionLabels {
            session: OTHER_SESSIONS.to_owned(),
        };
        self.session_prompt_tokens
            .get_or_create(&other)
            .inc_by(prompt);
        self.session_cached_tokens
            .get_or_create(&other)
            .inc_by(cached);
        self.session_cache_write_tokens
            .get_or_create(&other)
            .inc_by(written);
        if let Some(r) = state.other.hit_ratio() {
            self.session_cache_hit_ratio.get_or_create(&other).set(r);
        }
    }

    /// The prompt cache figures of `session` so far (`None`: no model call recorded, or the
    /// session was not active among the last [`SESSION_FIGURES_MAX`]).
    pub fn session_cache(&self, session: &str) -> Option<SessionCache> {
        let state = self.session_cache.lock().unwrap_or_else(|e| e.into_inner());
        state.figures.get(session).map(|(c, _)| *c)
    }

    /// Counts a request refused before routing.
    pub fn refused(&self, reason: &str) {
        self.refused_requests
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts an error of `kind`.
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Records a finished turn.
    pub fn turn(&self, outcome: &str, wall: Duration, model_micros: u64, engine_micros: u64) {
        self.turns
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
        self.turn_seconds.observe(wall.as_secs_f64());
        if outcome == "ok" {
            let engine = Duration::from_micros(engine_micros);
            let model = Duration::from_micros(model_micros);
            let host = wall.saturating_sub(model).saturating_sub(engine);
            self.turn_model_seconds.observe(model.as_secs_f64());
            self.turn_engine_seconds.observe(engine.as_secs_f64());
            self.turn_host_seconds.observe(host.as_secs_f64());
        }
    }

    /// Records an engine-API call.
    pub fn engine_call(&self, method: &str, took: Duration, ok: bool) {
        let labels = MethodLabels {
            method: method.to_owned(),
        };
        self.engine_calls.get_or_create(&labels).inc();
        self.engine_call_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        let source = || SourceLabels {
            source: "engine_api".into(),
        };
        match method {
            "assemble" => self
                .assemble_seconds
                .get_or_create(&source())
                .observe(took.as_secs_f64()),
            "compact" => self
                .compaction_seconds
                .get_or_create(&CompactionLabels {
                    source: "engine_api".into(),
                    trigger: "api".into(),
                })
                .observe(took.as_secs_f64()),
            _ => {}
        }
        if !ok {
            self.error("engine");
        }
    }

    /// Records what a finished turn reports of its engine calls: each `assemble` and each
    /// compaction.
    pub fn turn_details(&self, outcome: &TurnOutcome) {
        self.session_usage(&outcome.session_key, &outcome.usage);
        let m = &outcome.modelled_cache;
        for (rule, prompt, cached, written) in [
            ("openai", m.openai_prompt, m.openai_cached, 0),
            (
                "anthropic",
                m.anthropic_prompt,
                m.anthropic_read,
                m.anthropic_written,
            ),
        ] {
            let labels = RuleLabels { rule: rule.into() };
            self.modelled_prompt_tokens
                .get_or_create(&labels)
                .inc_by(prompt);
            self.modelled_cached_tokens
                .get_or_create(&labels)
                .inc_by(cached);
            self.modelled_cache_write_tokens
                .get_or_create(&labels)
                .inc_by(written);
        }
        let turn = self.assemble_seconds.get_or_create(&SourceLabels {
            source: "turn".into(),
        });
        for micros in &outcome.assemble_micros {
            turn.observe(Duration::from_micros(*micros).as_secs_f64());
        }
        for c in &outcome.compactions {
            self.compaction_seconds
                .get_or_create(&CompactionLabels {
                    source: "turn".into(),
                    trigger: c.trigger.clone(),
                })
                .observe(Duration::from_micros(c.micros).as_secs_f64());
        }
    }

    /// Measures `path` (a file with its `-wal` and `-shm` companions, or a directory's files,
    /// recursively) as `store` at each scrape.
    pub fn watch_store(&mut self, store: &'static str, path: PathBuf) {
        self.stores.push((store, path));
    }

    /// Shows `tracer`'s counters as `trace_turns` and its file's size as a store.
    pub(crate) fn watch_trace(&mut self, tracer: &crate::trace::Tracer) {
        if tracer.enabled() {
            self.watch_store("turn_trace", tracer.path().to_path_buf());
        }
        self.tracer = Some(tracer.clone());
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        if let Some(t) = &self.tracer {
            let stats = t.stats();
            for (outcome, n) in [
                ("written", stats.written),
                ("failed", stats.failed),
                ("dropped", stats.dropped),
            ] {
                self.trace_turns
                    .get_or_create(&OutcomeLabels {
                        outcome: outcome.into(),
                    })
                    .inner()
                    .store(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if let Some(engines) = &self.engines {
            self.quarantines
                .set(i64::try_from(engines.quarantines().len()).unwrap_or(i64::MAX));
        }
        for (store, path) in &self.stores {
            let bytes = i64::try_from(disk_bytes(path)).unwrap_or(i64::MAX);
            self.store_bytes
                .get_or_create(&StoreLabels {
                    store: (*store).to_owned(),
                })
                .set(bytes);
        }
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding metrics failed: {e}");
        }
        out
    }
}

/// Bytes of `path` on disk: a file with its SQLite companions, or a directory's files.
fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    if meta.is_file() {
        let companions = ["-wal", "-shm"].iter().map(|suffix| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            std::fs::metadata(PathBuf::from(p))
                .map(|m| m.len())
                .unwrap_or(0)
        });
        return meta.len() + companions.sum::<u64>();
    }
    let mut total = 0;
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(entry.path()),
                Ok(t) if t.is_file() => total += entry.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// The key with the smallest tick.
fn least_recent<'a>(entries: impl Iterator<Item = (&'a String, u64)>) -> Option<String> {
    entries.min_by_key(|(_, t)| *t).map(|(k, _)| k.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The `session` label of every sample of `family` in `text`, with its value.
    fn samples(text: &str, family: &str) -> Vec<(String, f64)> {
        let head = format!("{family}{{session=\"");
        text.lines()
            .filter_map(|l| l.strip_prefix(&head))
            .map(|rest| {
                let (label, value) = rest.split_once("\"} ").unwrap();
                (label.to_owned(), value.trim().parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn per_session_series_are_capped_and_the_rest_summed() {
        let m = Metrics::new(None);
        let sessions = SESSION_SERIES_MAX * 3 / 2;
        let usage = clawctx_protocol::Usage {
            input: 30,
            cache_read: 10,
            ..Default::default()
        };
        for i in 0..sessions {
            m.session_usage(&format!("agent:main:s{i}"), &usage);
        }
        // The first session is active again: it gets a series back, the least recent goes.
        m.session_usage("agent:main:s0", &usage);
        let text = m.render();
        let prompt = samples(&text, "clawctx_gateway_session_prompt_tokens_total");
        let cached = samples(&text, "clawctx_gateway_session_cached_prompt_tokens_total");
        let ratio = samples(&text, "clawctx_gateway_session_cache_hit_ratio");
        for family in [&prompt, &cached, &ratio] {
            assert_eq!(family.len(), SESSION_SERIES_MAX + 1, "{text}");
        }
        let total: f64 = prompt.iter().map(|(_, v)| v).sum();
        assert_eq!(total, ((sessions + 1) * 40) as f64, "no prompt token lost");
        let total_cached: f64 = cached.iter().map(|(_, v)| v).sum();
        assert_eq!(total_cached, ((sessions + 1) * 10) as f64);
        let value = |family: &[(String, f64)], s: &str| {
            family.iter().find(|(k, _)| k == s).map(|(_, v)| *v)
        };
        let folded = sessions - SESSION_SERIES_MAX + 1;
        assert_eq!(value(&prompt, OTHER_SESSIONS), Some((folded * 40) as f64));
        assert_eq!(value(&ratio, OTHER_SESSIONS), Some(0.25));
        assert_eq!(value(&prompt, "agent:main:s0"), Some(40.0));
        assert_eq!(value(&prompt, "agent:main:s1"), None);
        let last = format!("agent:main:s{}", sessions - 1);
        assert_eq!(value(&prompt, &last), Some(40.0));
        // The dashboard keeps each session's own figures, first call included.
        let s0 = m.session_cache("agent:main:s0").unwrap();
        assert_eq!((s0.prompt_tokens, s0.cached_tokens), (80, 20));
        assert!(m.session_cache("agent:main:s1").is_some());
    }

    #[test]
    fn the_dashboards_figures_keep_the_most_recent_sessions() {
        let m = Metrics::new(None);
        let usage = clawctx_protocol::Usage {
            input: 1,
            ..Default::default()
        };
        for i in 0..SESSION_FIGURES_MAX + 5 {
            m.session_usage(&format!("s{i}"), &usage);
        }
        let state = m.session_cache.lock().unwrap();
        assert_eq!(state.figures.len(), SESSION_FIGURES_MAX);
        drop(state);
        assert!(m.session_cache("s0").is_none());
        assert!(m
            .session_cache(&format!("s{}", SESSION_FIGURES_MAX + 4))
            .is_some());
    }
}
