//! cargo-fuzz's entry to `livecheck_fuzz_checks::eventstream_decoder::check`: the properties and the input
//! format are documented there; fuzz/checks/tests/seeds.rs replays this target's seeds through it in `make test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| livecheck_fuzz_checks::eventstream_decoder::check(input));
