//! Placeholder: the harness is being written.
