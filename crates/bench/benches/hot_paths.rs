//! Criterion micro-benchmarks (placeholder, filled in below).
fn main() {}
