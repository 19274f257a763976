//! The part of Envoy's dynamic-module ABI this module uses, declared by hand from
//! `source/extensions/dynamic_modules/abi/abi.h` of envoyproxy/envoy (no bindgen, no SDK dependency).
//! Pointers Envoy hands over are opaque here; enums are C `int`s.

use std::ffi::{c_char, c_void};

/// The version string Envoy 1.40.0 compares against `ENVOY_DYNAMIC_MODULES_ABI_VERSION`; a mismatch only
/// logs a warning ("Dynamic module ABI version ... is deprecated"), a match logs "... matched.".
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

pub type EnvoyPtr = *mut c_void;
pub type ModulePtr = *const c_void;

/// `envoy_dynamic_module_type_envoy_buffer`: bytes Envoy owns.
#[repr(C)]
pub struct EnvoyBuffer {
    pub ptr: *const c_char,
    pub length: usize,
}

/// `envoy_dynamic_module_type_envoy_http_header`: one header of a map Envoy owns.
#[repr(C)]
pub struct EnvoyHttpHeader {
    pub key_ptr: *const c_char,
    pub key_length: usize,
    pub value_ptr: *const c_char,
    pub value_length: usize,
}

/// `envoy_dynamic_module_type_module_buffer`: bytes the module owns, read by Envoy during the call.
#[repr(C)]
pub struct ModuleBuffer {
    pub ptr: *const c_char,
    pub length: usize,
}

impl ModuleBuffer {
    pub const fn of(bytes: &'static [u8]) -> Self {
        Self {
            ptr: bytes.as_ptr().cast(),
            length: bytes.len(),
        }
    }
}

/// `envoy_dynamic_module_type_http_header_type_ResponseHeader`.
pub const RESPONSE_HEADER: i32 = 2;
/// `..._status_Continue`, the first value of every `on_http_filter_*_status` enum.
pub const CONTINUE: i32 = 0;

// Defined by the Envoy binary (`nm -D envoy` lists 781 `envoy_dynamic_module_callback_*`), resolved at
// dlopen time.
extern "C" {
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter_envoy_ptr: EnvoyPtr,
        header_type: i32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
}
