//! Log capture for exact-text assertions: [`CollectingLogger`] records the registry/guard
//! lines, [`capture_tracing`] the `tracing` events of the current thread.

use std::sync::{Arc, Mutex};

use clawctx_engine::registry::{EngineLogger, LogLevel};

#[derive(Default)]
pub struct CollectingLogger {
    lines: Mutex<Vec<(LogLevel, String)>>,
}

impl CollectingLogger {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn lines(&self) -> Vec<(LogLevel, String)> {
        self.lines.lock().unwrap().clone()
    }

    pub fn errors(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|(l, _)| *l == LogLevel::Error)
            .map(|(_, s)| s)
            .collect()
    }

    pub fn warnings(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|(l, _)| *l == LogLevel::Warn)
            .map(|(_, s)| s)
            .collect()
    }
}

impl EngineLogger for CollectingLogger {
    fn log(&self, level: LogLevel, line: &str) {
        self.lines.lock().unwrap().push((level, line.to_owned()));
    }
}

/// `tracing` events (level and message) recorded while the guard of [`capture_tracing`] lives.
#[derive(Clone, Default)]
pub struct TracingCapture {
    events: Arc<Mutex<Vec<(tracing::Level, String)>>>,
}

impl TracingCapture {
    /// Every event so far: level and message (fields other than `message` appended as
    /// ` name=value`).
    pub fn events(&self) -> Vec<(tracing::Level, String)> {
        self.events.lock().unwrap().clone()
    }

    /// The messages of `WARN` events.
    pub fn warnings(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|(l, _)| *l == tracing::Level::WARN)
            .map(|(_, m)| m)
            .collect()
    }
}

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

struct CaptureSubscriber(TracingCapture);

impl tracing::Subscriber for CaptureSubscriber {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut v = MessageVisitor(String::new());
        event.record(&mut v);
        self.0
            .events
            .lock()
            .unwrap()
            .push((*event.metadata().level(), v.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Records the `tracing` events of the current thread until the returned guard is dropped.
/// With a current-thread tokio runtime (plain `#[tokio::test]`) that is every event of the
/// test's tasks (not of `spawn_blocking` threads).
pub fn capture_tracing() -> (tracing::subscriber::DefaultGuard, TracingCapture) {
    let capture = TracingCapture::default();
    let guard = tracing::subscriber::set_default(CaptureSubscriber(capture.clone()));
    (guard, capture)
}
