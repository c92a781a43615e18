//! The crate's error type: what went wrong while generating, reading, benchmarking or
//! evaluating, phrased so the caller knows whether to fix an input or report a bug.

use std::path::PathBuf;

/// Errors at the `clawctx-bench` boundary.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Reading or writing a file failed (fix the path or permissions).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An input file is malformed (fix the file).
    #[error("{path}:{line}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when the whole file is at fault).
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// An argument is not usable (fix the command line).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The engine under test failed (a bug in that engine or its setup).
    #[error("engine `{engine}` failed during {stage}: {message}")]
    Engine {
        /// Engine id.
        engine: String,
        /// Lifecycle stage.
        stage: String,
        /// The engine's error.
        message: String,
    },
    /// A model call of the judged eval failed (check the provider's config, key and limits).
    #[error("model `{model}`: {message}")]
    Model {
        /// The model ref.
        model: String,
        /// The provider's error.
        message: String,
    },
    /// An invariant the instruments check was broken (a bug in the engine under test).
    #[error("engine `{engine}` broke an invariant: {message}")]
    Invariant {
        /// Engine id.
        engine: String,
        /// What was observed.
        message: String,
    },
}

impl BenchError {
    /// Wraps an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps an engine error.
    pub fn engine(engine: &str, stage: &str, message: impl std::fmt::Display) -> Self {
        BenchError::Engine {
            engine: engine.to_owned(),
            stage: stage.to_owned(),
            message: message.to_string(),
        }
    }
}

/// Result alias.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
