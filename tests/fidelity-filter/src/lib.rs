//! Placeholder: the fidelity filter is being written.
