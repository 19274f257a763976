//! One event, as read and as written: kept as the upstream's JSON while nothing of it changes
//! (written as it came), a new text spliced straight into that JSON, and a tree built only when
//! something else must change. Also where an event read in place keeps its text ([`TextPlace`]).

use std::borrow::Cow;
use std::cell::OnceCell;

use serde_json::Value;

use super::pointer::at_mut;

pub(super) fn set_text(ev: &mut Ev, pointer: &str, text: String) {
    if ev.splice_text(pointer, &text) {
        return;
    }
    if let Some(slot) = ev.data_mut().and_then(|data| at_mut(data, pointer)) {
        *slot = Value::String(text);
    }
}

/// Appends `text` as the JSON string literal serde_json writes for it: most texts
/// ([`crate::swar::written_as_is`]) as they are between quotes, any other through serde_json.
pub(super) fn push_literal(out: &mut String, text: &str) -> Option<()> {
    if crate::swar::written_as_is(text) {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(text).ok()?);
    }
    Some(())
}

/// An event's JSON as it came with a new text written into it ([`Ev::spliced_raw`]): where that
/// text's literal and the event's `id` literal now stand.
struct Spliced {
    raw: String,
    span: (&'static str, std::ops::Range<usize>),
    join_id: Option<std::ops::Range<usize>>,
}

/// One event, as read and as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ev {
    pub name: Option<String>,
    /// The upstream's JSON as it came, while nothing about the event changed: it is written as
    /// it is (no tree built, nothing serialized). Any change through [`Ev::data_mut`] drops it.
    raw: Option<String>,
    /// The JSON as a tree; built on first use for an event read from `raw`.
    data: OnceCell<Value>,
    /// Chat, read without its tree: its one choice's index and whether the chunk finishes it
    /// (what `write` remembers of a chunk it passes through).
    pub choice: Option<(u64, bool)>,
    /// Where the text field at this JSON pointer stands in `raw` (bytes of its string literal,
    /// quotes included): a new text for it is written there, and the rest of `raw` kept.
    span: Option<(&'static str, std::ops::Range<usize>)>,
    /// A Chat chunk read plain whose delta is its text alone and that finishes nothing: where its
    /// `id` literal stands in `raw`. Such a chunk is its own bare rest, and joins another like it
    /// with the same choice and id without a tree.
    join_id: Option<std::ops::Range<usize>>,
    /// What the template that read it knows of it (Anthropic, Responses), while `raw` is kept.
    pub(super) templated: Option<Templated>,
}

/// What a template's read says of a text event (Anthropic, Responses): its vendor writes,
/// renumbers and joins it without building its tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Templated {
    /// The template that read it: events of one template differ only in its slots.
    pub template: u64,
    /// Its content block's (output item's) index upstream.
    pub block: u64,
    /// The number it counts itself by upstream.
    pub sequence: Option<u64>,
}

impl Ev {
    pub(crate) fn new(name: Option<String>, data: Value) -> Self {
        Self {
            name,
            raw: None,
            data: OnceCell::from(data),
            choice: None,
            span: None,
            join_id: None,
            templated: None,
        }
    }

    /// An event read into its tree from `raw`; `as_it_came` (no key twice in any object, see
    /// [`super::util::parse`]): until something changes it (through [`Ev::data_mut`]) it is
    /// written as it came, not serialized again: key order, spacing and escapes as the vendor
    /// wrote them.
    pub(crate) fn parsed(name: Option<String>, raw: String, data: Value, as_it_came: bool) -> Self {
        Self {
            name,
            raw: as_it_came.then_some(raw),
            data: OnceCell::from(data),
            choice: None,
            span: None,
            join_id: None,
            templated: None,
        }
    }

    /// An event read without building its tree: `raw` is JSON the tree reader accepts.
    pub(crate) fn unchanged(
        name: Option<String>,
        raw: String,
        choice: Option<(u64, bool)>,
    ) -> Self {
        Self {
            name,
            raw: Some(raw),
            data: OnceCell::new(),
            choice,
            span: None,
            join_id: None,
            templated: None,
        }
    }

    /// What the template that read it knows of it, while it is written from its JSON as it came.
    pub(crate) fn templated(&self) -> Option<Templated> {
        self.raw.as_ref().and(self.templated)
    }

    /// Says where the string at `pointer` stands in the event's JSON as it came.
    pub(crate) fn text_span(&mut self, pointer: &'static str, span: std::ops::Range<usize>) {
        self.span = Some((pointer, span));
    }

    pub(crate) fn join_id_at(&mut self, id: std::ops::Range<usize>) {
        self.join_id = Some(id);
    }

    /// The `id` literal of a plain Chat chunk of text alone, while it is written from `raw`.
    pub(crate) fn join_id(&self) -> Option<&str> {
        self.raw.as_deref()?.get(self.join_id.clone()?)
    }

    /// Writes `text` as the string at `pointer` straight into the JSON as it came (nothing else
    /// of it changes: key order, spacing, other escapes); `false` when the event has no such
    /// place, and nothing changed.
    fn splice_text(&mut self, pointer: &str, text: &str) -> bool {
        let Some(spliced) = self.spliced_raw(pointer, text) else {
            return false;
        };
        self.raw = Some(spliced.raw);
        self.span = Some(spliced.span);
        self.join_id = spliced.join_id;
        // A tree built from the JSON before holds the old text.
        self.data = OnceCell::new();
        true
    }

    /// A copy of the event with `text` as the string at `pointer`: written straight into a copy
    /// of its JSON as it came where it has such a place ([`Ev::splice_text`]), else set in a copy
    /// of its tree.
    pub(super) fn with_text(&self, pointer: &str, text: String) -> Ev {
        match self.spliced_raw(pointer, &text) {
            Some(spliced) => Ev {
                name: self.name.clone(),
                raw: Some(spliced.raw),
                data: OnceCell::new(),
                choice: self.choice,
                span: Some(spliced.span),
                join_id: spliced.join_id,
                templated: self.templated,
            },
            None => {
                let mut copy = self.clone();
                set_text(&mut copy, pointer, text);
                copy
            }
        }
    }

    /// The event's JSON as it came with `text` as the string at `pointer` (one copy, nothing
    /// else of it changed); `None` when the event has no such place.
    fn spliced_raw(&self, pointer: &str, text: &str) -> Option<Spliced> {
        let (Some(raw), Some((at, span))) = (self.raw.as_deref(), self.span.as_ref()) else {
            return None;
        };
        if *at != pointer || span.start > span.end {
            return None;
        }
        let (before, after) = (raw.get(..span.start)?, raw.get(span.end..)?);
        let mut spliced = String::with_capacity(raw.len() - span.len() + text.len() + 2);
        spliced.push_str(before);
        push_literal(&mut spliced, text)?;
        let new_end = spliced.len();
        spliced.push_str(after);
        // What stands after the text moved with it.
        let join_id = self.join_id.clone().map(|id| {
            if id.start >= span.end {
                (id.start + new_end - span.end)..(id.end + new_end - span.end)
            } else {
                id
            }
        });
        Some(Spliced {
            raw: spliced,
            span: (*at, span.start..new_end),
            join_id,
        })
    }

    pub(crate) fn data(&self) -> &Value {
        self.data.get_or_init(|| {
            self.raw
                .as_deref()
                .and_then(|raw| serde_json::from_str(raw).ok())
                .unwrap_or(Value::Null)
        })
    }

    /// The tree, to change: the event is no longer written as it came.
    pub(crate) fn data_mut(&mut self) -> Option<&mut Value> {
        self.data();
        self.raw = None;
        self.choice = None;
        self.span = None;
        self.join_id = None;
        self.templated = None;
        self.data.get_mut()
    }

    /// Sets the number field `key` of the event's object to `n` (renumbering what the vendor
    /// numbers, as the caller sees it); an event that holds `n` there already is left as it
    /// came.
    pub(crate) fn set_number(&mut self, key: &str, n: u64) {
        if self.data().get(key).and_then(Value::as_u64) == Some(n) {
            return;
        }
        if let Some(Value::Object(fields)) = self.data_mut() {
            fields.insert(key.to_owned(), Value::from(n));
        }
    }

    /// The upstream's JSON, when the event is unchanged.
    pub(crate) fn raw(&self) -> Option<&str> {
        self.raw.as_deref()
    }
}

/// An event of answer text alone, read in place ([`Format::text_alone`]).
pub(crate) struct TextAlone<'d> {
    pub text: Cow<'d, str>,
    pub place: TextPlace,
}

/// Where an event read in place keeps its text: what its [`Ev`] says when it is queued.
#[derive(Debug, Clone)]
pub(crate) struct TextPlace {
    pub channel: usize,
    /// The event's name (`event:` field), when the vendor names its events.
    pub name: Option<&'static str>,
    /// The choice it belongs to (Chat).
    pub choice: Option<u64>,
    /// Its content block's (Anthropic) or output item's (Responses) index upstream.
    pub block: Option<u64>,
    /// The number the event counts itself by upstream (Responses' `sequence_number`).
    pub sequence: Option<u64>,
    /// The template that read it, numbered by its vendor's reader (Anthropic, Responses).
    pub template: Option<u64>,
    /// JSON pointer to the text, and where its string literal stands in the data (quotes in).
    pub pointer: &'static str,
    pub span: std::ops::Range<usize>,
    /// Where the event's `id` literal stands: it joins another like it ([`Ev::join_id`]; Chat).
    pub join_id: Option<std::ops::Range<usize>>,
}

impl TextPlace {
    /// The event, as `read` reads it, its JSON `data`.
    pub(super) fn ev(self, data: String) -> Ev {
        let templated = self.templated();
        let mut ev = Ev::unchanged(
            self.name.map(str::to_owned),
            data,
            self.choice.map(|c| (c, false)),
        );
        ev.text_span(self.pointer, self.span);
        if let Some(id) = self.join_id {
            ev.join_id_at(id);
        }
        ev.templated = templated;
        ev
    }

    /// What the template that read the event knows of it.
    pub(super) fn templated(&self) -> Option<Templated> {
        Some(Templated {
            template: self.template?,
            block: self.block?,
            sequence: self.sequence,
        })
    }
}
