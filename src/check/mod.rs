//! The words every module that decides speaks: what a check is ([`Stage`], [`Mode`], [`Kind`],
//! [`Alert`]), what it decided ([`Outcome`], [`CheckResult`], [`ToolResult`]), what stopped a turn
//! ([`stop`]), and how a report writes it ([`Report`], [`result_head`]).
//!
//! They sit below `config`, `verdict`, `judge`, `tools` and `record` and import none of them, so
//! those modules share them without importing one another in a circle.

mod definition;
mod outcome;
pub(crate) mod report;
pub mod stop;

pub use definition::{Alert, Kind, Mode, Stage};
pub use outcome::{CheckResult, Outcome, ToolResult};
pub use report::{result_head, Report};
