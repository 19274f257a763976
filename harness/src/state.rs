//! What host calls can see and change: the store data of the wasmtime `Store`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::abi::StreamType;
use crate::callout::{CallResponse, Callout};
use crate::metrics::Metrics;
use crate::options::{LogLevel, Options};
use crate::shared::{Queues, SharedData};
use crate::stream::{Stream, StreamId};

/// A line the guest logged (or, for failures, the host logged about the guest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// The level it was logged at.
    pub level: LogLevel,
    /// The message, as the guest wrote it.
    pub message: String,
}

/// Work Envoy defers until the current VM call returns (`addAfterVmCallAction`).
#[derive(Clone, Debug)]
pub(crate) enum Deferred {
    Continue(StreamId, StreamType),
    Close(StreamId),
    LocalReply {
        stream: StreamId,
        status: u32,
        body: Vec<u8>,
        headers: Vec<(String, String)>,
    },
    QueueReady {
        root: u32,
        token: u32,
    },
}

/// State that survives a VM reload: the emulated Envoy around the VM.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub(crate) options: Options,
    pub(crate) logs: Vec<LogRecord>,
    pub(crate) metrics: Metrics,
    pub(crate) shared_data: SharedData,
    pub(crate) queues: Queues,
    pub(crate) streams: BTreeMap<StreamId, Stream>,
    pub(crate) callouts: BTreeMap<u32, Callout>,
    /// Emulated time since the host started.
    pub(crate) now: Duration,
    pub(crate) generation: u64,
    pub(crate) random_state: u64,
}

impl World {
    pub(crate) fn log(&mut self, level: LogLevel, message: String) {
        if level >= self.options.log_level {
            self.logs.push(LogRecord { level, message });
        }
    }
}

/// State of one VM instance.
#[derive(Debug, Default)]
pub(crate) struct VmState {
    pub(crate) root_id: u32,
    pub(crate) next_context_id: u32,
    /// Live contexts: the root maps to `None`, stream contexts to their stream.
    pub(crate) contexts: BTreeMap<u32, Option<StreamId>>,
    pub(crate) current_context: u32,
    pub(crate) effective_context: u32,
    pub(crate) deferred: Vec<Deferred>,
    pub(crate) stop_next_iteration: bool,
    pub(crate) in_configure: bool,
    pub(crate) call_response: Option<CallResponse>,
    pub(crate) status: (u32, String),
    pub(crate) failed: bool,
    pub(crate) tick_period: Option<Duration>,
    pub(crate) next_tick: Duration,
    pub(crate) next_http_token: u32,
}

impl VmState {
    pub(crate) fn new() -> Self {
        Self {
            root_id: 1,
            next_context_id: 2,
            next_http_token: 1,
            ..Self::default()
        }
    }

    /// proxy-wasm-cpp-host's `contextOrEffectiveContext()`.
    pub(crate) fn context(&self) -> u32 {
        if self.effective_context != 0 && self.contexts.contains_key(&self.effective_context) {
            self.effective_context
        } else {
            self.current_context
        }
    }
}

/// The store data.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) world: World,
    pub(crate) vm: VmState,
}

impl State {
    /// The stream of the context host calls act on, if it is a stream context.
    pub(crate) fn stream_id(&self) -> Option<StreamId> {
        self.vm.contexts.get(&self.vm.context()).copied().flatten()
    }

    pub(crate) fn stream(&self) -> Option<&Stream> {
        self.stream_id().and_then(|id| self.world.streams.get(&id))
    }

    pub(crate) fn stream_mut(&mut self) -> Option<&mut Stream> {
        let id = self.stream_id()?;
        self.world.streams.get_mut(&id)
    }
}
