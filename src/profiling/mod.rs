//! Profiling workloads: ignored tests that drive the product code many times over for a profiler
//! (`make bench-v8-turn`, `make bench-v8-stream`, `make bench-sites`). They are not product code
//! and not tests of it, so they live here rather than beside the modules they exercise (compare
//! `crate::profile`, the opt-in timer the shipped build can carry).

mod stream;
mod turn;
