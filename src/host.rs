//! The doors from the logic to the host, one per context kind: [`Host`] for an HTTP stream,
//! [`RootHost`] for the VM's root context, both over [`SharedStore`] where they share Envoy's
//! shared data. `proxy/` implements them over the proxy-wasm ABI; tests use [`fake::FakeHost`]
//! and [`fake::FakeRoot`]. Every method maps host errors to `None`/`false`, never panics.

/// Whether Envoy should go on with the stream or hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Pause,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

pub trait Host {
    /// A request header as text; `None` when absent or not valid UTF-8.
    fn request_header(&self, name: &str) -> Option<String>;
    fn set_request_header(&mut self, name: &str, value: Option<&str>);
    fn response_header(&self, name: &str) -> Option<String>;
    fn set_response_header(&mut self, name: &str, value: Option<&str>);
    /// The buffered request body: Envoy's `body_size` bytes from the start.
    fn request_body(&self, size: usize) -> Option<Vec<u8>>;
    fn response_body(&self, size: usize) -> Option<Vec<u8>>;
    /// Replaces all `size` buffered response bytes (Envoy only edits at offset 0 or the end).
    fn replace_response_body(&mut self, size: usize, body: &[u8]) -> bool;
    /// Answers the caller from the filter. From the request phase the reply runs back through
    /// this filter's response callbacks.
    fn send_local_reply(&mut self, status: u32, headers: &[(&str, &str)], body: &[u8]);
    /// Resets the response stream (Envoy's `proxy_close_stream(HttpResponse)`); the upstream
    /// request goes with it. Takes effect after the current callback returns.
    fn close_response(&mut self);
    /// Resets the response stream from a later timer tick, no sooner than a grace period from now
    /// (so bytes written in this callback reach the caller first), unless the stream ended before.
    /// Bounds a cut whose upstream sends nothing more: the model stops within a second.
    fn close_response_soon(&mut self);
    /// The response headers are held (the filter paused in their callback): a later tick lets
    /// them go on after a grace period unless a body callback came first (an Envoy whose wasm
    /// filter lacks `allow_on_headers_stop_iteration` gives the filter no body behind them).
    fn release_response_headers_soon(&mut self);
    /// In a body callback of an answer whose headers were held: whether a tick already let them
    /// go. Either way the watch ends; headers still held stay held until the answer goes on.
    fn response_headers_released(&mut self) -> bool;
    /// Whether held response headers always get their body behind them (Envoy's native filter
    /// statuses, the dynamic module): an answer's headers can then wait for its decision in any
    /// Envoy, where a wasm filter needs the operator's `hold_answer_headers` (and Envoy's
    /// `allow_on_headers_stop_iteration`).
    fn holds_response_headers(&self) -> bool;
    /// Whether [`Host::close_response_soon`] ends the caller's response cleanly right after the
    /// bytes written in this callback (the dynamic module: end of stream to the caller, the
    /// upstream reset), rather than resetting it later (proxy-wasm has no call that ends a
    /// response). A stream may then end as soon as what it shows is decided.
    fn ends_response_cleanly(&self) -> bool;
    fn increment_counter(&mut self, name: &str);
    /// Sends an HTTP callout to `cluster`; `None` when Envoy refuses it (unknown cluster, …).
    fn dispatch_callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32>;
    /// During a callout's answer: its `:status` (`None` for a reset).
    fn callout_status(&self) -> Option<u16>;
    fn callout_body(&self, size: usize) -> Option<Vec<u8>>;
    /// Hands a finished turn's report to the VM's outbox; it leaves from the root context later.
    fn deliver(&mut self, job: crate::outbox::Job);
    /// Lets a held request (or response) go on, from outside its own callbacks.
    fn resume_request(&mut self);
    fn resume_response(&mut self);
    /// Never called with request or response text, keys or patterns.
    fn log(&mut self, level: LogLevel, message: &str);
    /// The host's clock, in milliseconds since the Unix epoch.
    fn now_unix_millis(&self) -> u64;
    fn random(&mut self) -> u64;
}

/// The shared data of the plugin's VMs (Envoy's `proxy_get_shared_data` / `proxy_set_shared_data`).
pub trait SharedStore {
    /// The value and its compare-and-swap token; `None` when the key was never set.
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)>;
    /// Sets `key`, if `cas` is 0 or still the key's token. `false`: the token changed (or the
    /// host refused), nothing was written.
    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool;
}

/// What the VM's root context asks of the host: its clock, logs and counters, the callouts that
/// carry turn reports, a periodic tick, and acting on streams from outside their callbacks.
pub trait RootHost: SharedStore {
    /// The host's clock, in milliseconds since the Unix epoch.
    fn now_unix_millis(&self) -> u64;
    fn random(&mut self) -> u64;
    /// Never called with request or response text, keys or patterns.
    fn log(&mut self, level: LogLevel, message: &str);
    /// Adds `by` to the counter `name`.
    fn count(&mut self, name: &str, by: i64);
    /// Sends an HTTP callout to `cluster`, answered to the root; `None` when Envoy refuses it.
    fn dispatch_callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32>;
    /// During a callout's answer: its `:status` (`None` for a reset).
    fn callout_status(&self) -> Option<u16>;
    /// Asks for a tick every `period_ms`; `false` when the host refuses.
    fn set_tick_period(&mut self, period_ms: u32) -> bool;
    /// Resets the response streams of the HTTP contexts `streams` (see [`Host::close_response`]).
    fn close_streams(&mut self, streams: &[u32]);
    /// Lets the held responses of the HTTP contexts `streams` go on.
    fn resume_responses(&mut self, streams: &[u32]);
}

#[cfg(test)]
pub mod fake {
    //! A host that records what the logic did, for native unit tests of the turn state machine.

    use std::collections::BTreeMap;

    use super::{Host, LogLevel, RootHost, SharedStore};

    #[derive(Debug, Default)]
    pub struct LocalReply {
        pub status: u32,
        pub headers: BTreeMap<String, String>,
        pub body: Vec<u8>,
    }

    /// A callout the logic sent: cluster, headers, body, timeout in milliseconds.
    pub type SentCallout = (String, Vec<(String, String)>, Vec<u8>, u64);

    #[derive(Debug, Default)]
    pub struct FakeHost {
        pub request_headers: BTreeMap<String, String>,
        pub response_headers: BTreeMap<String, String>,
        pub request_body: Vec<u8>,
        pub response_body: Vec<u8>,
        pub local_reply: Option<LocalReply>,
        pub counters: BTreeMap<String, u64>,
        pub logs: Vec<(LogLevel, String)>,
        pub seed: u64,
        pub closed: bool,
        pub close_soon: bool,
        /// The host's abilities ([`Host::holds_response_headers`], [`Host::ends_response_cleanly`]):
        /// false as in a wasm filter unless a test says otherwise.
        pub holds_headers: bool,
        pub ends_cleanly: bool,
        /// Held response headers a tick would let go (`release_response_headers_soon`).
        pub headers_watched: bool,
        /// Set by a test: a tick let the held headers go before the body came.
        pub headers_released: bool,
        pub callouts: Vec<SentCallout>,
        pub callout_answer: Option<(Option<u16>, Vec<u8>)>,
        pub resumed: Vec<&'static str>,
        pub delivered: Vec<crate::outbox::Job>,
        /// How many times the response body was rewritten.
        pub body_rewrites: usize,
        pub shared: SharedData,
    }

    impl FakeHost {
        pub fn with_request(headers: &[(&str, &str)]) -> Self {
            Self {
                request_headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                ..Self::default()
            }
        }

        pub fn local_reply_json(&self) -> serde_json::Value {
            let reply = self.local_reply.as_ref().expect("a local reply");
            serde_json::from_slice(&reply.body).expect("a JSON reply")
        }

        /// The response body the caller gets, as JSON.
        pub fn response_json(&self) -> serde_json::Value {
            serde_json::from_slice(&self.response_body).unwrap_or_default()
        }
    }

    /// Records a callout a fake host sent; its token is its place in `callouts`, from 1.
    fn record(
        callouts: &mut Vec<SentCallout>,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32> {
        let headers = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        callouts.push((cluster.to_owned(), headers, body.to_vec(), timeout_ms));
        u32::try_from(callouts.len()).ok()
    }

    /// Envoy's shared data: a token per write, compare-and-swap as Envoy does it.
    #[derive(Debug, Default)]
    pub struct SharedData {
        pub entries: BTreeMap<String, (Vec<u8>, u32)>,
        next: u32,
    }

    impl SharedStore for SharedData {
        fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
            self.entries.get(key).cloned()
        }

        fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
            if let Some((_, current)) = self.entries.get(key) {
                if cas != 0 && cas != *current {
                    return false;
                }
            }
            self.next += 1;
            self.entries
                .insert(key.to_owned(), (value.to_vec(), self.next));
            true
        }
    }

    impl SharedStore for FakeHost {
        fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
            self.shared.get(key)
        }
        fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
            self.shared.set(key, value, cas)
        }
    }

    impl Host for FakeHost {
        fn request_header(&self, name: &str) -> Option<String> {
            self.request_headers.get(name).cloned()
        }
        fn set_request_header(&mut self, name: &str, value: Option<&str>) {
            match value {
                Some(v) => self.request_headers.insert(name.to_owned(), v.to_owned()),
                None => self.request_headers.remove(name),
            };
        }
        fn response_header(&self, name: &str) -> Option<String> {
            self.response_headers.get(name).cloned()
        }
        fn set_response_header(&mut self, name: &str, value: Option<&str>) {
            match value {
                Some(v) => self.response_headers.insert(name.to_owned(), v.to_owned()),
                None => self.response_headers.remove(name),
            };
        }
        fn request_body(&self, size: usize) -> Option<Vec<u8>> {
            self.request_body.get(..size).map(<[u8]>::to_vec)
        }
        fn response_body(&self, size: usize) -> Option<Vec<u8>> {
            self.response_body.get(..size).map(<[u8]>::to_vec)
        }
        fn replace_response_body(&mut self, size: usize, body: &[u8]) -> bool {
            if size != self.response_body.len() {
                return false;
            }
            self.response_body = body.to_vec();
            self.body_rewrites += 1;
            true
        }
        fn send_local_reply(&mut self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
            assert!(self.local_reply.is_none(), "a second local reply");
            self.local_reply = Some(LocalReply {
                status,
                headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                body: body.to_vec(),
            });
        }
        fn close_response(&mut self) {
            self.closed = true;
        }
        fn close_response_soon(&mut self) {
            self.close_soon = true;
        }
        fn release_response_headers_soon(&mut self) {
            self.headers_watched = true;
        }
        fn holds_response_headers(&self) -> bool {
            self.holds_headers
        }
        fn ends_response_cleanly(&self) -> bool {
            self.ends_cleanly
        }
        fn response_headers_released(&mut self) -> bool {
            self.headers_watched = false;
            self.headers_released
        }
        fn dispatch_callout(
            &mut self,
            cluster: &str,
            headers: &[(&str, &str)],
            body: &[u8],
            timeout_ms: u64,
        ) -> Option<u32> {
            record(&mut self.callouts, cluster, headers, body, timeout_ms)
        }
        fn callout_status(&self) -> Option<u16> {
            self.callout_answer.as_ref().and_then(|(s, _)| *s)
        }
        fn callout_body(&self, size: usize) -> Option<Vec<u8>> {
            self.callout_answer
                .as_ref()
                .and_then(|(_, b)| b.get(..size).map(<[u8]>::to_vec))
        }
        fn deliver(&mut self, job: crate::outbox::Job) {
            self.delivered.push(job);
        }
        fn resume_request(&mut self) {
            self.resumed.push("request");
        }
        fn resume_response(&mut self) {
            self.resumed.push("response");
        }
        fn increment_counter(&mut self, name: &str) {
            *self.counters.entry(name.to_owned()).or_default() += 1;
        }
        fn log(&mut self, level: LogLevel, message: &str) {
            self.logs.push((level, message.to_owned()));
        }
        fn now_unix_millis(&self) -> u64 {
            1_790_000_000_000
        }
        fn random(&mut self) -> u64 {
            self.seed += 1;
            self.seed
        }
    }

    /// A root context's host whose clock a test sets, recording what the root did.
    #[derive(Debug, Default)]
    pub struct FakeRoot {
        pub now: u64,
        pub seed: u64,
        pub logs: Vec<(LogLevel, String)>,
        pub counters: BTreeMap<String, i64>,
        pub callouts: Vec<SentCallout>,
        /// Set by a test: Envoy refuses every callout.
        pub refuse_callouts: bool,
        /// Set by a test: the `:status` of the callout being answered.
        pub callout_status: Option<u16>,
        pub shared: SharedData,
        pub tick_period_ms: Option<u32>,
        /// Set by a test: Envoy gives the VM no timer.
        pub refuse_tick: bool,
        /// Streams reset, and streams whose held response went on, in order.
        pub closed: Vec<u32>,
        pub resumed: Vec<u32>,
    }

    impl FakeRoot {
        pub fn at(now: u64) -> Self {
            Self {
                now,
                ..Self::default()
            }
        }

        pub fn counter(&self, name: &str) -> i64 {
            self.counters.get(name).copied().unwrap_or(0)
        }

        /// The logs of `level`, in order.
        pub fn logged(&self, level: LogLevel) -> Vec<&str> {
            self.logs
                .iter()
                .filter(|(l, _)| *l == level)
                .map(|(_, m)| m.as_str())
                .collect()
        }
    }

    impl SharedStore for FakeRoot {
        fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
            self.shared.get(key)
        }
        fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
            self.shared.set(key, value, cas)
        }
    }

    impl RootHost for FakeRoot {
        fn now_unix_millis(&self) -> u64 {
            self.now
        }
        fn random(&mut self) -> u64 {
            self.seed += 1;
            self.seed
        }
        fn log(&mut self, level: LogLevel, message: &str) {
            self.logs.push((level, message.to_owned()));
        }
        fn count(&mut self, name: &str, by: i64) {
            *self.counters.entry(name.to_owned()).or_default() += by;
        }
        fn dispatch_callout(
            &mut self,
            cluster: &str,
            headers: &[(&str, &str)],
            body: &[u8],
            timeout_ms: u64,
        ) -> Option<u32> {
            if self.refuse_callouts {
                return None;
            }
            record(&mut self.callouts, cluster, headers, body, timeout_ms)
        }
        fn callout_status(&self) -> Option<u16> {
            self.callout_status
        }
        fn set_tick_period(&mut self, period_ms: u32) -> bool {
            if self.refuse_tick {
                return false;
            }
            self.tick_period_ms = Some(period_ms);
            true
        }
        fn close_streams(&mut self, streams: &[u32]) {
            self.closed.extend(streams);
        }
        fn resume_responses(&mut self, streams: &[u32]) {
            self.resumed.extend(streams);
        }
    }
}
