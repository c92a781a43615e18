//! A log sink that records every line, for exact-text assertions.

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
        self.lines().into_iter().filter(|(l, _)| *l == LogLevel::Error).map(|(_, s)| s).collect()
    }

    pub fn warnings(&self) -> Vec<String> {
        self.lines().into_iter().filter(|(l, _)| *l == LogLevel::Warn).map(|(_, s)| s).collect()
    }
}

impl EngineLogger for CollectingLogger {
    fn log(&self, level: LogLevel, line: &str) {
        self.lines.lock().unwrap().push((level, line.to_owned()));
    }
}
