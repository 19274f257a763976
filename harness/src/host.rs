//! The public face of the harness: one VM and its root context, driven like Envoy drives a
//! worker thread's filter, and queried for what the caller and the upstream received.

use std::time::Duration;

use wasmtime::Module;

use crate::abi::status;
use crate::callout::{self, CallResponse, Callout};
use crate::error::HarnessError;
use crate::headers::HeaderMap;
use crate::options::{FailurePolicy, Options};
use crate::state::{LogRecord, World};
use crate::stream::{Received, Stream, StreamId};
use crate::vm::{self, Vm};

/// What a side of an unknown stream received: nothing.
static NOTHING_RECEIVED: Received = Received::EMPTY;

/// Compiles a module once, to start many hosts from it cheaply.
///
/// Cranelift takes seconds on a filter-sized module and every test process compiles its own, so
/// the machine code is kept in a cache directory (`$LIVECHECK_HARNESS_CACHE`, else the system
/// temporary directory), keyed by the module's bytes and the engine's compatibility hash; a cache that
/// cannot be read or written only costs the compile.
pub fn compile(wasm: &[u8]) -> Result<Module, HarnessError> {
    let engine = vm::engine()?;
    let cached = cache_path(engine, wasm);
    if let Some(path) = &cached {
        if path.is_file() {
            // SAFETY: the file was written by `Module::serialize` below for this exact module and
            // wasmtime version (both in its name); wasmtime also checks its own header and engine
            // compatibility, and we fall back to compiling on any error.
            if let Ok(module) = unsafe { Module::deserialize_file(engine, path) } {
                return Ok(module);
            }
        }
    }
    let module = Module::new(engine, wasm).map_err(|e| HarnessError::Compile(format!("{e:#}")))?;
    if let (Some(path), Ok(bytes)) = (&cached, module.serialize()) {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok(module)
}

fn cache_path(engine: &wasmtime::Engine, wasm: &[u8]) -> Option<std::path::PathBuf> {
    use std::hash::{Hash, Hasher};
    let dir = std::env::var_os("LIVECHECK_HARNESS_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("livecheck-harness-cache"));
    std::fs::create_dir_all(&dir).ok()?;
    // Two independent 64-bit digests of the bytes: a collision would need both to collide.
    let mut a = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut a);
    wasm.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    (wasm.len(), wasm.iter().rev().step_by(7).collect::<Vec<_>>()).hash(&mut b);
    Some(dir.join(format!("{:016x}{:016x}.cwasm", a.finish(), b.finish())))
}

/// One wasm VM with its root context, like one Envoy worker running the plugin.
pub struct Host {
    module: Module,
    pub(crate) vm: Vm,
    next_stream: u64,
    vm_starts: u32,
    /// Emulated time of the last VM load (or reload attempt): Envoy's `handle_wrapper.last_load`.
    last_load: Duration,
}

impl Host {
    /// Compiles `wasm` and starts it like Envoy: `_initialize`, the root context's
    /// `on_context_create`, `on_vm_start` and `on_configure`.
    pub fn new(wasm: &[u8], options: Options) -> Result<Self, HarnessError> {
        Self::from_module(&compile(wasm)?, options)
    }

    /// Like [`Host::new`] with an already compiled module (see [`compile`]).
    pub fn from_module(module: &Module, options: Options) -> Result<Self, HarnessError> {
        let world = World {
            options,
            ..World::default()
        };
        let mut host = Self {
            module: module.clone(),
            vm: Vm::new(module, world),
            next_stream: 0,
            vm_starts: 0,
            last_load: Duration::ZERO,
        };
        host.start_vm()?;
        Ok(host)
    }

    /// Instantiates and configures the current VM (Envoy's `createWasm` + `onStart` +
    /// `onConfigure`).
    fn start_vm(&mut self) -> Result<(), HarnessError> {
        self.vm_starts = self.vm_starts.saturating_add(1);
        self.last_load = self.vm.state().world.now;
        let module = self.module.clone();
        let result = self.vm.start(&module).and_then(|()| self.start_root());
        if result.is_err() {
            self.vm.state_mut().vm.failed = true;
        }
        result
    }

    fn start_root(&mut self) -> Result<(), HarnessError> {
        let root = self.vm.state().vm.root_id;
        self.vm.state_mut().vm.contexts.insert(root, None);
        let r = i32::from_ne_bytes(root.to_ne_bytes());
        let trap = HarnessError::from;
        self.vm
            .call(root, "proxy_on_context_create", &[r, 0])
            .map_err(trap)?;
        self.run_deferred();
        let vm_config = self.vm.state().world.options.vm_config.len();
        let started = self
            .vm
            .call(root, "proxy_on_vm_start", &[r, len_arg(vm_config)])
            .map_err(trap)?;
        self.run_deferred();
        if started == Some(0) {
            return Err(HarnessError::ConfigRejected);
        }
        let plugin_config = self.vm.state().world.options.plugin_config.len();
        self.vm.state_mut().vm.in_configure = true;
        let configured = self
            .vm
            .call(root, "proxy_on_configure", &[r, len_arg(plugin_config)]);
        self.vm.state_mut().vm.in_configure = false;
        self.run_deferred();
        if configured.map_err(trap)? == Some(0) {
            return Err(HarnessError::ConfigRejected);
        }
        Ok(())
    }

    /// A fresh VM in place of a failed one (`FAIL_RELOAD`). Callouts of the old VM are gone.
    fn reload(&mut self) {
        let mut world = std::mem::take(&mut self.vm.state_mut().world);
        world.generation = world.generation.saturating_add(1);
        world.callouts.clear();
        self.vm = Vm::new(&self.module, world);
        if self.start_vm().is_err() {
            self.vm.state_mut().vm.failed = true;
        }
    }

    /// How many times a VM was started (1 + reloads).
    pub fn vm_starts(&self) -> u32 {
        self.vm_starts
    }

    /// The VM's linear memory in bytes: what it has grown to, as Envoy's V8 commits it. Linear
    /// memory never shrinks, so this is the VM's peak so far.
    pub fn memory_bytes(&mut self) -> usize {
        self.vm.memory_bytes()
    }

    /// Whether the current VM has failed.
    pub fn vm_failed(&self) -> bool {
        self.vm.state().vm.failed
    }

    /// A new HTTP stream (its context is created at its request headers, as Envoy does).
    /// After a VM failure, `FAIL_RELOAD` starts a fresh VM here once the reload backoff has
    /// passed since the last load (before that the stream fails closed: 503), and `FAIL_OPEN`
    /// leaves the filter out of the stream. Envoy: `PluginConfig::maybeReloadHandleIfNeeded`,
    /// called by `createContext` for every new filter.
    pub fn new_stream(&mut self) -> StreamId {
        let state = self.vm.state();
        let policy = state.world.options.failure_policy;
        let backoff_over =
            state.world.now.saturating_sub(self.last_load) >= state.world.options.reload_backoff;
        if state.vm.failed && policy == FailurePolicy::FailReload && backoff_over {
            self.reload();
        }
        let failed = self.vm.state().vm.failed;
        self.next_stream = self.next_stream.saturating_add(1);
        let id = StreamId(self.next_stream);
        let state = self.vm.state_mut();
        let context_id = state.vm.next_context_id;
        state.vm.next_context_id = context_id.saturating_add(1);
        state.vm.contexts.insert(context_id, Some(id));
        let stream = Stream {
            context_id,
            generation: state.world.generation,
            bypass: failed && policy == FailurePolicy::FailOpen,
            ..Stream::default()
        };
        state.world.streams.insert(id, stream);
        id
    }

    fn live(&self, id: StreamId) -> Result<&Stream, HarnessError> {
        match self.stream_ref(id) {
            Some(s) if !s.finished => Ok(s),
            _ => Err(HarnessError::UnknownStream),
        }
    }

    /// The caller sends request headers.
    pub fn send_request_headers<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        id: StreamId,
        headers: &[(K, V)],
        end_of_stream: bool,
    ) -> Result<(), HarnessError> {
        if self.live(id)?.request.headers.is_some() {
            return Err(HarnessError::Stream(
                "request headers were already sent".into(),
            ));
        }
        self.headers_in(
            id,
            false,
            HeaderMap::from_pairs(headers),
            end_of_stream,
            false,
        );
        Ok(())
    }

    fn check_request_open(&self, id: StreamId) -> Result<(), HarnessError> {
        let s = self.live(id)?;
        if s.request.headers.is_none() {
            return Err(HarnessError::Stream("send request headers first".into()));
        }
        if s.request.end_received {
            return Err(HarnessError::Stream("the request already ended".into()));
        }
        Ok(())
    }

    /// The caller sends a request body chunk.
    pub fn send_request_body(
        &mut self,
        id: StreamId,
        body: &[u8],
        end_of_stream: bool,
    ) -> Result<(), HarnessError> {
        self.check_request_open(id)?;
        self.data_in(id, false, body.to_vec(), end_of_stream, false);
        Ok(())
    }

    /// The caller sends request trailers (ending the request).
    pub fn send_request_trailers<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        id: StreamId,
        trailers: &[(K, V)],
    ) -> Result<(), HarnessError> {
        self.check_request_open(id)?;
        self.trailers_in(id, false, HeaderMap::from_pairs(trailers));
        Ok(())
    }

    /// Whether the upstream can answer; `Ok(false)` when the stream was reset or replied
    /// locally, so the answer is dropped as Envoy drops it.
    fn check_response_open(&self, id: StreamId, headers: bool) -> Result<bool, HarnessError> {
        let s = self.live(id)?;
        if s.upstream.headers.is_none() {
            return Err(HarnessError::Stream(
                "the upstream has not received request headers".into(),
            ));
        }
        if s.upstream.reset || s.response_aborted {
            return Ok(false);
        }
        if headers && s.response.headers.is_some() {
            return Err(HarnessError::Stream(
                "response headers were already sent".into(),
            ));
        }
        if !headers && (s.response.headers.is_none() || s.response.end_received) {
            return Err(HarnessError::Stream("no open response".into()));
        }
        Ok(true)
    }

    /// The upstream answers with headers (including `:status`).
    pub fn send_response_headers<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        id: StreamId,
        headers: &[(K, V)],
        end_of_stream: bool,
    ) -> Result<(), HarnessError> {
        if self.check_response_open(id, true)? {
            self.headers_in(
                id,
                true,
                HeaderMap::from_pairs(headers),
                end_of_stream,
                false,
            );
        }
        Ok(())
    }

    /// The upstream sends a response body chunk.
    pub fn send_response_body(
        &mut self,
        id: StreamId,
        body: &[u8],
        end_of_stream: bool,
    ) -> Result<(), HarnessError> {
        if self.check_response_open(id, false)? {
            self.data_in(id, true, body.to_vec(), end_of_stream, false);
        }
        Ok(())
    }

    /// The upstream sends response trailers.
    pub fn send_response_trailers<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        id: StreamId,
        trailers: &[(K, V)],
    ) -> Result<(), HarnessError> {
        if self.check_response_open(id, false)? {
            self.trailers_in(id, true, HeaderMap::from_pairs(trailers));
        }
        Ok(())
    }

    /// The caller or the upstream resets the stream.
    pub fn reset_stream(&mut self, id: StreamId) -> Result<(), HarnessError> {
        self.live(id)?;
        self.reset(id);
        Ok(())
    }

    /// The stream ends: `on_log`, `on_done`, `on_delete` (Envoy logs, then destroys filters).
    pub fn finish_stream(&mut self, id: StreamId) -> Result<(), HarnessError> {
        let (context, created) = {
            let s = self.live(id)?;
            (s.context_id, s.context_created)
        };
        let same_vm =
            self.stream_ref(id).map(|s| s.generation) == Some(self.vm.state().world.generation);
        if created && same_vm && !self.vm.state().vm.failed {
            let c = i32::from_ne_bytes(context.to_ne_bytes());
            if let Some(s) = self.stream_mut(id) {
                s.in_log_phase = true;
            }
            let _ = self.vm.call(context, "proxy_on_log", &[c]);
            self.run_deferred();
            if let Some(s) = self.stream_mut(id) {
                s.in_log_phase = false;
            }
            let _ = self.vm.call(context, "proxy_on_done", &[c]);
            self.run_deferred();
            let _ = self.vm.call(context, "proxy_on_delete", &[c]);
            self.run_deferred();
        }
        if same_vm {
            self.vm.state_mut().vm.contexts.remove(&context);
        }
        if let Some(s) = self.stream_mut(id) {
            s.finished = true;
        }
        Ok(())
    }

    /// Callouts dispatched and not answered yet, oldest first.
    pub fn pending_callouts(&self) -> Vec<Callout> {
        self.vm.state().world.callouts.values().cloned().collect()
    }

    /// The cluster answers a callout: `proxy_on_http_call_response` runs on the root context
    /// (Envoy makes callouts on the root; the SDK then sets the effective context).
    pub fn answer_callout<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        token: u32,
        headers: &[(K, V)],
        body: &[u8],
    ) -> Result<(), HarnessError> {
        self.answer_callout_with_trailers(token, headers, body, &[] as &[(&str, &str)])
    }

    /// Like [`Host::answer_callout`], with response trailers.
    pub fn answer_callout_with_trailers<
        K: AsRef<str>,
        V: AsRef<str>,
        K2: AsRef<str>,
        V2: AsRef<str>,
    >(
        &mut self,
        token: u32,
        headers: &[(K, V)],
        body: &[u8],
        trailers: &[(K2, V2)],
    ) -> Result<(), HarnessError> {
        let callout = self.take_callout(token)?;
        let response = CallResponse {
            headers: HeaderMap::from_pairs(headers).pairs().to_vec(),
            body: body.to_vec(),
            trailers: HeaderMap::from_pairs(trailers).pairs().to_vec(),
        };
        self.deliver_callout(&callout, Some(response));
        Ok(())
    }

    /// The callout fails (reset): Envoy's `onHttpCallFailure` delivers 0 headers, 0 body,
    /// 0 trailers with status `BrokenConnection` / "reset".
    pub fn fail_callout(&mut self, token: u32) -> Result<(), HarnessError> {
        let callout = self.take_callout(token)?;
        self.deliver_callout(&callout, None);
        Ok(())
    }

    fn take_callout(&mut self, token: u32) -> Result<Callout, HarnessError> {
        self.vm
            .state_mut()
            .world
            .callouts
            .remove(&token)
            .ok_or(HarnessError::UnknownCallout(token))
    }

    fn deliver_callout(&mut self, callout: &Callout, response: Option<CallResponse>) {
        let state = self.vm.state_mut();
        if callout.generation != state.world.generation || state.vm.failed {
            return;
        }
        let root = state.vm.root_id;
        let n = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
        let (headers, body, trailers) = response.as_ref().map_or((0, 0, 0), |r| {
            (n(r.headers.len()), n(r.body.len()), n(r.trailers.len()))
        });
        if response.is_none() {
            state.vm.status = (
                u32::try_from(status::BROKEN_CONNECTION).unwrap_or(0),
                "reset".into(),
            );
        }
        state.vm.call_response = response;
        let args = [
            i32::from_ne_bytes(root.to_ne_bytes()),
            i32::from_ne_bytes(callout.token.to_ne_bytes()),
            headers,
            body,
            trailers,
        ];
        let _ = self.vm.call(root, "proxy_on_http_call_response", &args);
        let state = self.vm.state_mut();
        state.vm.call_response = None;
        state.vm.status = (0, String::new());
        self.run_deferred();
    }

    /// Moves emulated time on, firing ticks and callout timeouts in time order.
    pub fn advance_time(&mut self, by: Duration) {
        let target = self.vm.state().world.now + by;
        loop {
            let state = self.vm.state();
            let tick = state
                .vm
                .tick_period
                .filter(|_| !state.vm.failed)
                .map(|_| state.vm.next_tick);
            let timeout = state
                .world
                .callouts
                .values()
                .filter_map(|c| c.deadline.map(|d| (d, c.token)))
                .min();
            let next = match (tick, timeout) {
                (Some(t), Some((d, _))) if t <= d => Some((t, None)),
                (_, Some((d, token))) => Some((d, Some(token))),
                (Some(t), None) => Some((t, None)),
                (None, None) => None,
            };
            match next {
                Some((at, what)) if at <= target => {
                    self.vm.state_mut().world.now = at;
                    match what {
                        Some(token) => {
                            if let Ok(c) = self.take_callout(token) {
                                self.deliver_callout(&c, Some(callout::timeout_response()));
                            }
                        }
                        None => self.tick(),
                    }
                }
                _ => break,
            }
        }
        self.vm.state_mut().world.now = target;
    }

    fn tick(&mut self) {
        let state = self.vm.state_mut();
        let Some(period) = state.vm.tick_period else {
            return;
        };
        state.vm.next_tick += period;
        let root = state.vm.root_id;
        let _ = self.vm.call(
            root,
            "proxy_on_tick",
            &[i32::from_ne_bytes(root.to_ne_bytes())],
        );
        self.run_deferred();
    }

    /// Emulated time since the host started.
    pub fn elapsed(&self) -> Duration {
        self.vm.state().world.now
    }

    /// What the caller received on this stream.
    pub fn caller_received(&self, id: StreamId) -> &Received {
        self.stream_ref(id)
            .map_or(&NOTHING_RECEIVED, |s| &s.downstream)
    }

    /// What the upstream received on this stream.
    pub fn upstream_received(&self, id: StreamId) -> &Received {
        self.stream_ref(id)
            .map_or(&NOTHING_RECEIVED, |s| &s.upstream)
    }

    /// Everything logged at or above the configured level, in order.
    pub fn logs(&self) -> &[LogRecord] {
        &self.vm.state().world.logs
    }

    /// Whether any log message contains `text`.
    pub fn logs_contain(&self, text: &str) -> bool {
        self.logs().iter().any(|l| l.message.contains(text))
    }

    /// A counter or gauge, by the name the guest defined or by Envoy's stats name
    /// (`wasmcustom.<name>`).
    pub fn metric(&self, name: &str) -> Option<u64> {
        self.vm.state().world.metrics.value(name)
    }

    /// The values recorded in a histogram, by either name.
    pub fn histogram(&self, name: &str) -> Option<Vec<u64>> {
        self.vm
            .state()
            .world
            .metrics
            .histogram(name)
            .map(<[u64]>::to_vec)
    }

    /// Shared data under `key`: the value and its CAS.
    pub fn shared_data(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.vm.state().world.shared_data.get(key).cloned()
    }

    /// Sets shared data as another worker would (cas 0: unconditionally).
    pub fn set_shared_data(&mut self, key: &str, value: &[u8]) {
        self.vm.state_mut().world.shared_data.set(key, value, 0);
    }

    /// A property the guest set on this stream (path segments joined with `.`).
    pub fn stream_property(&self, id: StreamId, path: &str) -> Option<&[u8]> {
        self.stream_ref(id)?.properties.get(path).map(Vec::as_slice)
    }

    /// The tick period the root context asked for.
    pub fn tick_period(&self) -> Option<Duration> {
        self.vm.state().vm.tick_period
    }

    /// The root context id of the current VM.
    pub fn root_context_id(&self) -> u32 {
        self.vm.state().vm.root_id
    }

    /// The context id of a stream.
    pub fn context_id(&self, id: StreamId) -> Option<u32> {
        self.stream_ref(id).map(|s| s.context_id)
    }
}

fn len_arg(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
