//! The numbers of the proxy-wasm ABI 0.2.1: statuses, map, buffer and stream types.

/// `WasmResult` values (proxy-wasm-cpp-host `include/proxy-wasm/wasm_api_impl.h`).
pub(crate) mod status {
    pub(crate) const OK: i32 = 0;
    pub(crate) const NOT_FOUND: i32 = 1;
    pub(crate) const BAD_ARGUMENT: i32 = 2;
    pub(crate) const PARSE_FAILURE: i32 = 4;
    pub(crate) const INVALID_MEMORY_ACCESS: i32 = 6;
    pub(crate) const EMPTY: i32 = 7;
    pub(crate) const CAS_MISMATCH: i32 = 8;
    pub(crate) const BROKEN_CONNECTION: i32 = 11;
    pub(crate) const UNIMPLEMENTED: i32 = 12;
}

/// WASI errno values the host returns (proxy-wasm-cpp-host `src/exports.cc`).
pub(crate) mod errno {
    pub(crate) const SUCCESS: i32 = 0;
    pub(crate) const BADF: i32 = 8;
    pub(crate) const FAULT: i32 = 21;
    pub(crate) const INVAL: i32 = 28;
    pub(crate) const NOENT: i32 = 44;
    pub(crate) const NOSYS: i32 = 52;
    pub(crate) const NOTSUP: i32 = 58;
}

/// Which header map a host call names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapType {
    RequestHeaders,
    RequestTrailers,
    ResponseHeaders,
    ResponseTrailers,
    GrpcInitialMetadata,
    GrpcTrailingMetadata,
    CallResponseHeaders,
    CallResponseTrailers,
}

impl MapType {
    pub(crate) fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            0 => Self::RequestHeaders,
            1 => Self::RequestTrailers,
            2 => Self::ResponseHeaders,
            3 => Self::ResponseTrailers,
            4 => Self::GrpcInitialMetadata,
            5 => Self::GrpcTrailingMetadata,
            6 => Self::CallResponseHeaders,
            7 => Self::CallResponseTrailers,
            _ => return None,
        })
    }
}

/// Which buffer a host call names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BufferType {
    RequestBody,
    ResponseBody,
    DownstreamData,
    UpstreamData,
    CallResponseBody,
    GrpcReceive,
    VmConfiguration,
    PluginConfiguration,
    CallData,
}

impl BufferType {
    pub(crate) fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            0 => Self::RequestBody,
            1 => Self::ResponseBody,
            2 => Self::DownstreamData,
            3 => Self::UpstreamData,
            4 => Self::CallResponseBody,
            5 => Self::GrpcReceive,
            6 => Self::VmConfiguration,
            7 => Self::PluginConfiguration,
            8 => Self::CallData,
            _ => return None,
        })
    }
}

/// Which stream `proxy_continue_stream` / `proxy_close_stream` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamType {
    Request,
    Response,
    Downstream,
    Upstream,
}

impl StreamType {
    pub(crate) fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            0 => Self::Request,
            1 => Self::Response,
            2 => Self::Downstream,
            3 => Self::Upstream,
            _ => return None,
        })
    }
}

/// Envoy's filter statuses after proxy-wasm-cpp-host converted the guest's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadersStatus {
    Continue,
    StopIteration,
    StopAll,
}

/// Envoy's data statuses after conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataStatus {
    Continue,
    StopAndBuffer,
    StopNoBuffer,
}

/// The guest's answer to a headers callback, as proxy-wasm-cpp-host
/// `ContextBase::convertVmCallResultToFilterHeadersStatus` maps it.
pub(crate) fn headers_status(
    raw: u64,
    stop_next: bool,
    allow_stop_iteration: bool,
) -> HeadersStatus {
    match raw {
        _ if stop_next || raw > 4 => HeadersStatus::StopAll,
        0 => HeadersStatus::Continue,
        1 if allow_stop_iteration => HeadersStatus::StopIteration,
        // StopAllIterationAndBuffer (3) and StopAllIterationAndWatermark (4) both stall the body;
        // the watermark/413 distinction is drawn by the buffer limit below.
        _ => HeadersStatus::StopAll,
    }
}

/// The guest's answer to a body callback (`convertVmCallResultToFilterDataStatus`).
pub(crate) fn data_status(raw: u64, stop_next: bool) -> DataStatus {
    match raw {
        _ if stop_next || raw > 3 => DataStatus::StopNoBuffer,
        0 => DataStatus::Continue,
        1 => DataStatus::StopAndBuffer,
        // StopIterationAndWatermark (2) buffers with flow control; StopIterationNoBuffer (3).
        2 => DataStatus::StopAndBuffer,
        _ => DataStatus::StopNoBuffer,
    }
}
