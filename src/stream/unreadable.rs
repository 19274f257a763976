//! The stream of an API whose answers never stream (embeddings, Message Batches): any event it
//! were sent is unreadable, so a stream that should not exist is never passed unread.

use super::event::Ev;
use super::format::{Format, Unit, Unreadable};
use crate::api::ToolCall;
use crate::sse;

pub(crate) struct NoStream;

impl Format for NoStream {
    fn read(&mut self, _event: sse::Event) -> Result<Unit, Unreadable> {
        Err(Unreadable)
    }

    fn write(&mut self, _ev: Ev, _out: &mut Vec<u8>) {}

    fn close(&mut self, _reply: Option<&str>, _out: &mut Vec<u8>) {}

    fn call_of(&self, _key: u64, _events: &[&Ev]) -> Option<ToolCall> {
        None
    }
}
