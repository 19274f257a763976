//! Bounds-checked access to guest memory from host calls, and allocation in the guest.
//!
//! Every pointer and length comes from the guest: out-of-range access is reported, never a
//! host panic. Data handed to the guest is allocated with the guest's `malloc` when it exports
//! one, else `proxy_on_memory_allocate` (proxy-wasm-cpp-host `WasmBase::getFunctions`).

use wasmtime::{Caller, Extern, Memory};

use crate::abi::status;
use crate::state::State;

/// What a host call that hands data to the guest returns: a status, or a trap when the guest's
/// allocator trapped.
pub(crate) type R = wasmtime::Result<i32>;

/// A host call's view of the guest.
pub(crate) struct Guest<'a, 'c> {
    pub(crate) caller: &'a mut Caller<'c, State>,
}

impl<'a, 'c> Guest<'a, 'c> {
    pub(crate) fn new(caller: &'a mut Caller<'c, State>) -> Self {
        Self { caller }
    }

    pub(crate) fn state(&mut self) -> &mut State {
        self.caller.data_mut()
    }

    fn memory(&mut self) -> Option<Memory> {
        match self.caller.get_export("memory") {
            Some(Extern::Memory(m)) => Some(m),
            _ => None,
        }
    }

    /// The bytes at `ptr..ptr+len`, or `None` when out of range.
    pub(crate) fn read(&mut self, ptr: u32, len: u32) -> Option<Vec<u8>> {
        let memory = self.memory()?;
        let start = usize::try_from(ptr).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        memory
            .data(&*self.caller)
            .get(start..end)
            .map(<[u8]>::to_vec)
    }

    /// Like `read`, as text (lossy).
    pub(crate) fn read_str(&mut self, ptr: u32, len: u32) -> Option<String> {
        self.read(ptr, len)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Writes `data` at `ptr`; false when out of range.
    pub(crate) fn write(&mut self, ptr: u32, data: &[u8]) -> bool {
        let Some(memory) = self.memory() else {
            return false;
        };
        let Ok(start) = usize::try_from(ptr) else {
            return false;
        };
        let Some(end) = start.checked_add(data.len()) else {
            return false;
        };
        match memory.data_mut(&mut *self.caller).get_mut(start..end) {
            Some(dst) => {
                dst.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    pub(crate) fn write_u32(&mut self, ptr: u32, value: u32) -> bool {
        self.write(ptr, &value.to_le_bytes())
    }

    pub(crate) fn write_u64(&mut self, ptr: u32, value: u64) -> bool {
        self.write(ptr, &value.to_le_bytes())
    }

    /// Allocates `size` bytes in the guest. `Ok(None)` when the guest has no allocator or
    /// returned memory out of range; `Err` when the allocator trapped (the VM fails).
    pub(crate) fn allocate(&mut self, size: u32) -> wasmtime::Result<Option<u32>> {
        let func = ["malloc", "proxy_on_memory_allocate"]
            .iter()
            .find_map(|name| self.caller.get_export(name).and_then(Extern::into_func));
        let Some(func) = func else {
            return Ok(None);
        };
        let Ok(typed) = func.typed::<i32, i32>(&*self.caller) else {
            return Ok(None);
        };
        let ptr = typed.call(&mut *self.caller, i32::from_ne_bytes(size.to_ne_bytes()))?;
        Ok(Some(u32::from_ne_bytes(ptr.to_ne_bytes())))
    }

    /// proxy-wasm-cpp-host's `copyToPointerSize`: empty data is (0, 0); otherwise the data is
    /// copied into fresh guest memory. `Ok(false)` means an invalid memory access.
    pub(crate) fn copy_out(
        &mut self,
        data: &[u8],
        ptr_ptr: u32,
        size_ptr: u32,
    ) -> wasmtime::Result<bool> {
        let Ok(size) = u32::try_from(data.len()) else {
            return Ok(false);
        };
        let mut pointer = 0;
        if size > 0 {
            match self.allocate(size)? {
                Some(p) if self.write(p, data) => pointer = p,
                _ => return Ok(false),
            }
        }
        Ok(self.write_u32(ptr_ptr, pointer) && self.write_u32(size_ptr, size))
    }
}

/// Guest `i32` arguments are unsigned words.
pub(crate) fn word(v: i32) -> u32 {
    u32::from_ne_bytes(v.to_ne_bytes())
}

/// `Ok`, or `InvalidMemoryAccess` when the guest's pointers did not fit its memory.
pub(crate) fn ok_or_fault(ok: bool) -> i32 {
    if ok {
        status::OK
    } else {
        status::INVALID_MEMORY_ACCESS
    }
}
