//! One wasm VM: a wasmtime store and instance with the host functions linked.

use std::fmt;
use std::sync::OnceLock;

use wasmtime::{Engine, Instance, Linker, Module, Store, Val};

use crate::error::HarnessError;
use crate::options::LogLevel;
use crate::state::{State, VmState, World};
use crate::{hostcalls, wasi};

/// The ABI versions Envoy accepts, announced by an exported marker function.
const ABI_MARKERS: [&str; 3] = [
    "proxy_abi_version_0_2_1",
    "proxy_abi_version_0_2_0",
    "proxy_abi_version_0_1_0",
];

/// A compiler shared by every host: it holds compiled code only, never test state.
pub(crate) fn engine() -> Result<&'static Engine, HarnessError> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| Engine::new(&wasmtime::Config::new()).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| HarnessError::Compile(e.clone()))
}

/// Why a call into the guest did not return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The VM failed before (Envoy calls nothing in a failed VM).
    Failed,
    /// The guest trapped in this call: the VM has failed now (the message was logged as critical).
    Trapped(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed => write!(f, "the VM has failed"),
            Self::Trapped(message) => write!(f, "{message}"),
        }
    }
}

impl From<CallError> for HarnessError {
    /// A start-up callback that did not return.
    fn from(e: CallError) -> Self {
        HarnessError::Trap(e.to_string())
    }
}

pub(crate) struct Vm {
    pub(crate) store: Store<State>,
    instance: Option<Instance>,
}

impl Vm {
    /// A store around `world`; `start` instantiates and starts the module in it.
    pub(crate) fn new(module: &Module, world: World) -> Self {
        let store = Store::new(
            module.engine(),
            State {
                world,
                vm: VmState::new(),
            },
        );
        Self {
            store,
            instance: None,
        }
    }

    pub(crate) fn state(&self) -> &State {
        self.store.data()
    }

    pub(crate) fn state_mut(&mut self) -> &mut State {
        self.store.data_mut()
    }

    /// Instantiates like proxy-wasm-cpp-host `WasmBase::load`/`startVm`: missing imports and
    /// unknown ABI versions are load errors; `_initialize` (then `main` if present) or `_start`.
    pub(crate) fn start(&mut self, module: &Module) -> Result<(), HarnessError> {
        let mut linker = Linker::new(module.engine());
        hostcalls::link(&mut linker).map_err(|e| HarnessError::Instantiate(e.to_string()))?;
        wasi::link(&mut linker).map_err(|e| HarnessError::Instantiate(e.to_string()))?;
        let instance = linker
            .instantiate(&mut self.store, module)
            .map_err(|e| HarnessError::Instantiate(format!("{e:#}")))?;
        self.instance = Some(instance);
        if !ABI_MARKERS.iter().any(|m| self.has_export(m)) {
            return Err(HarnessError::AbiVersion);
        }
        if self.has_export("_initialize") {
            self.call(0, "_initialize", &[])?;
            if self.has_export("main") {
                self.call(0, "main", &[0, 0])?;
            }
        } else if self.has_export("_start") {
            self.call(0, "_start", &[])?;
        }
        Ok(())
    }

    pub(crate) fn has_export(&mut self, name: &str) -> bool {
        self.instance
            .and_then(|i| i.get_func(&mut self.store, name))
            .is_some()
    }

    /// The size of the exported linear memory, in bytes (0 before the VM started).
    pub(crate) fn memory_bytes(&mut self) -> usize {
        self.instance
            .and_then(|i| i.get_memory(&mut self.store, "memory"))
            .map_or(0, |m| m.data_size(&self.store))
    }

    /// Calls an export in context `context`. `Ok(None)` when the guest does not export it
    /// (Envoy then skips the callback); `Err` when it trapped: the VM has failed.
    pub(crate) fn call(
        &mut self,
        context: u32,
        name: &str,
        args: &[i32],
    ) -> Result<Option<u64>, CallError> {
        if self.state().vm.failed {
            return Err(CallError::Failed);
        }
        // A callback's stop request belongs to that callback alone, exported or not.
        self.state_mut().vm.stop_next_iteration = false;
        let Some(func) = self
            .instance
            .and_then(|i| i.get_func(&mut self.store, name))
        else {
            return Ok(None);
        };
        {
            let vm = &mut self.state_mut().vm;
            vm.current_context = context;
            vm.effective_context = 0;
        }
        let ty = func.ty(&self.store);
        let params: Vec<Val> = ty
            .params()
            .zip(args.iter().copied().chain(std::iter::repeat(0)))
            .map(|(p, a)| match p {
                wasmtime::ValType::I64 => Val::I64(i64::from(a)),
                _ => Val::I32(a),
            })
            .collect();
        let mut results: Vec<Val> = ty.results().map(|_| Val::I32(0)).collect();
        match func.call(&mut self.store, &params, &mut results) {
            Ok(()) => Ok(Some(match results.first() {
                Some(Val::I32(v)) => u64::from(u32::from_ne_bytes(v.to_ne_bytes())),
                Some(Val::I64(v)) => u64::from_ne_bytes(v.to_ne_bytes()),
                _ => 0,
            })),
            Err(e) => {
                let message = format!("Function: {name} failed: {e:#}");
                let state = self.state_mut();
                state.vm.failed = true;
                state.world.log(LogLevel::Critical, message.clone());
                Err(CallError::Trapped(message))
            }
        }
    }
}
