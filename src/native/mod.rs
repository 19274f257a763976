//! The native adapter: livecheck as an Envoy dynamic module (issue 56). For now only the ABI,
//! declared in `abi`; nothing here is wired to the logic yet.

pub mod abi;
