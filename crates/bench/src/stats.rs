//! Small measurement helpers: latency percentiles and the process's peak resident memory.

use std::time::Duration;

/// Percentiles of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// Sum.
    pub total_ms: f64,
}

impl Latency {
    /// Summarizes `samples` (nearest-rank percentiles).
    pub fn of(samples: &[Duration]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let total: f64 = ms.iter().sum();
        Self {
            count: ms.len() as u64,
            p50_ms: percentile(&ms, 50.0),
            p99_ms: percentile(&ms, 99.0),
            mean_ms: total / ms.len() as f64,
            max_ms: ms[ms.len() - 1],
            total_ms: total,
        }
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Nearest-rank percentile of sorted integers.
pub fn percentile_u64(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Peak resident set size of this process in bytes (`VmHWM`), when the OS tells.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident set size in bytes (`VmRSS`).
pub fn rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|k| k * 1024)
}

/// Resets the peak RSS to the current RSS (Linux `clear_refs` 5). Returns whether it worked;
/// when it did not, later peaks include everything that ran before.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}
