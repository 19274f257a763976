//! The one-pass reader behind [`Node`]: a JSON text read into a tree whose strings borrow the
//! text where they hold no escape, with no serde machinery on the way; and the same reading
//! straight into a `serde_json::Value` for a streamed event ([`read_value`], strict: a key twice
//! in an object is found as it is inserted).
//!
//! It reads the JSON a vendor's SDK writes and declines (`None`) whatever it is not sure of: a
//! syntax error, invalid UTF-8, a lone surrogate escape, a repeated key in a strict read, a number
//! it cannot place exactly, nesting past [`MAX_DEPTH`]. A declined text is read again by
//! serde_json (`json::read_node`), which accepts it or names the fault with its line and column,
//! so what is accepted, refused and said stays serde_json's. Whatever this reader accepts,
//! serde_json accepts as the same tree (`reader_agrees_with_serde_json` in `api/tests.rs` pins it
//! on every fixture and on every prefix and byte flip of them).
//!
//! Why: a turn reads two bodies, and serde_json's generic deserializer (two instantiations, its
//! visitor, its error paths) was ~2.6 µs of a ~12.5 µs turn under V8 and ~1,000 distinct x86
//! instructions of the ~10,000 a turn runs natively (callgrind): code that crowds the branch
//! predictors Envoy's own code shares (docs/design/011-measuring-cost.md).

use std::borrow::Cow;
use std::marker::PhantomData;

use bumpalo::Bump;
use serde_json::{Map, Number, Value};

use super::node::{has_repeated_key, Node, Obj};

/// Deeper nesting is left to serde_json, which refuses past 128.
const MAX_DEPTH: u32 = 100;

/// `text` as one JSON value with nothing but whitespace around it, its arrays, objects and
/// decoded strings laid out in `arena`; `strict` declines an object that repeats a key.
pub(crate) fn read<'a>(text: &'a [u8], strict: bool, arena: &'a Bump) -> Option<Node<'a>> {
    let open = Open {
        arena,
        items: Vec::new(),
        members: Vec::new(),
    };
    read_as(text, strict, open)
}

/// Whether `text` is one JSON value this reader accepts (as [`read`] does when not strict),
/// building nothing. `false` may still be JSON serde_json accepts (see the module's doc).
pub(super) fn is_json(text: &[u8]) -> bool {
    read_as::<()>(text, false, ()).is_some()
}

/// A JSON string's text between its quotes, decoded, a surrogate escape that is not one of a
/// pair read as U+FFFD (as the streamed arguments reader reads it, `stream::args`); `None` for an
/// escape JSON does not have.
pub(super) fn decode_lossy(raw: &str) -> Option<String> {
    unescape_as::<true>(raw)
}

/// [`read`] strictly, straight into a `serde_json::Value` (a streamed event's tree): no object
/// repeats a key.
pub(crate) fn read_value(text: &[u8]) -> Option<Value> {
    read_as(text, true, ())
}

fn read_as<'a, T: Tree<'a>>(text: &'a [u8], strict: bool, scratch: T::Scratch) -> Option<T> {
    let mut r = Reader {
        text,
        at: 0,
        strict,
        scratch,
        tree: PhantomData,
    };
    let tree = r.value(0)?;
    r.skip_space();
    (r.at == text.len()).then_some(tree)
}

/// What the reader builds: a [`Node`] borrowing the text and its arena, or a `Value`. An array's
/// items and an object's members are gathered in `Items` / `Members`, which may live in the
/// reader's `Scratch` until the container is whole.
trait Tree<'a>: Sized {
    type Scratch;
    type Items;
    type Members;
    fn null() -> Self;
    fn boolean(b: bool) -> Self;
    fn number(n: Number) -> Self;
    fn string(scratch: &mut Self::Scratch, s: Cow<'a, str>) -> Self;
    fn items(scratch: &mut Self::Scratch) -> Self::Items;
    fn push(scratch: &mut Self::Scratch, array: &mut Self::Items, item: Self);
    fn array(scratch: &mut Self::Scratch, array: Self::Items) -> Self;
    fn members(scratch: &mut Self::Scratch) -> Self::Members;
    /// `false` when the object has the key already and the read is strict.
    fn insert(
        scratch: &mut Self::Scratch,
        object: &mut Self::Members,
        key: Cow<'a, str>,
        value: Self,
        strict: bool,
    ) -> bool;
    /// `None` when the object repeats a key and the read is strict.
    fn object(scratch: &mut Self::Scratch, object: Self::Members, strict: bool) -> Option<Self>;
}

/// A [`Node`] tree's arena and its open arrays and objects: their items and members so far,
/// innermost last, moved into a slice of the arena once their container is whole. The stacks
/// are reused for the whole text (on the heap, not in the arena: a stack that grows leaves
/// nothing behind).
struct Open<'a> {
    arena: &'a Bump,
    items: Vec<Node<'a>>,
    members: Vec<(&'a str, Node<'a>)>,
}

impl<'a> Open<'a> {
    /// A decoded string kept in the arena; one with no escape is the text's own.
    fn keep(&self, s: Cow<'a, str>) -> &'a str {
        match s {
            Cow::Borrowed(s) => s,
            Cow::Owned(s) => self.arena.alloc_str(&s),
        }
    }
}

impl<'a> Tree<'a> for Node<'a> {
    type Scratch = Open<'a>;
    /// Where the array's items begin on the stack.
    type Items = usize;
    /// Where the object's members begin on the stack.
    type Members = usize;
    fn null() -> Self {
        Node::Null
    }
    fn boolean(b: bool) -> Self {
        Node::Bool(b)
    }
    fn number(n: Number) -> Self {
        Node::Number(n)
    }
    fn string(open: &mut Open<'a>, s: Cow<'a, str>) -> Self {
        Node::Str(open.keep(s))
    }
    fn items(open: &mut Open<'a>) -> usize {
        open.items.len()
    }
    fn push(open: &mut Open<'a>, _start: &mut usize, item: Self) {
        open.items.push(item);
    }
    fn array(open: &mut Open<'a>, start: usize) -> Self {
        let start = start.min(open.items.len());
        Node::Array(open.arena.alloc_slice_fill_iter(open.items.drain(start..)))
    }
    fn members(open: &mut Open<'a>) -> usize {
        open.members.len()
    }
    fn insert(
        open: &mut Open<'a>,
        _start: &mut usize,
        key: Cow<'a, str>,
        value: Self,
        _strict: bool,
    ) -> bool {
        // Checked once the object is whole: pairwise for small objects, sorted for large ones.
        let key = open.keep(key);
        open.members.push((key, value));
        true
    }
    fn object(open: &mut Open<'a>, start: usize, strict: bool) -> Option<Self> {
        let start = start.min(open.members.len());
        if strict && open.members.get(start..).is_some_and(has_repeated_key) {
            return None;
        }
        let members = open
            .arena
            .alloc_slice_fill_iter(open.members.drain(start..));
        Some(Node::Object(Obj::new(members)))
    }
}

impl<'a> Tree<'a> for Value {
    type Scratch = ();
    type Items = Vec<Value>;
    type Members = Map<String, Value>;
    fn null() -> Self {
        Value::Null
    }
    fn boolean(b: bool) -> Self {
        Value::Bool(b)
    }
    fn number(n: Number) -> Self {
        Value::Number(n)
    }
    fn string(_: &mut (), s: Cow<'a, str>) -> Self {
        Value::String(s.into_owned())
    }
    fn items(_: &mut ()) -> Vec<Value> {
        Vec::new()
    }
    fn push(_: &mut (), array: &mut Vec<Value>, item: Self) {
        array.push(item);
    }
    fn array(_: &mut (), array: Vec<Value>) -> Self {
        Value::Array(array)
    }
    fn members(_: &mut ()) -> Map<String, Value> {
        Map::new()
    }
    fn insert(
        _: &mut (),
        object: &mut Map<String, Value>,
        key: Cow<'a, str>,
        value: Self,
        strict: bool,
    ) -> bool {
        // A key twice keeps the last, as serde_json's own reading does.
        object.insert(key.into_owned(), value).is_none() || !strict
    }
    fn object(_: &mut (), object: Map<String, Value>, _strict: bool) -> Option<Self> {
        Some(Value::Object(object))
    }
}

/// Reading only: nothing is built; escapes are checked.
impl<'a> Tree<'a> for () {
    type Scratch = ();
    type Items = ();
    type Members = ();
    fn null() -> Self {}
    fn boolean(_: bool) -> Self {}
    fn number(_: Number) -> Self {}
    fn string(_: &mut (), _: Cow<'a, str>) -> Self {}
    fn items(_: &mut ()) -> Self::Items {}
    fn push(_: &mut (), _: &mut (), _: Self) {}
    fn array(_: &mut (), _: ()) -> Self {}
    fn members(_: &mut ()) -> Self::Members {}
    fn insert(_: &mut (), _: &mut (), _: Cow<'a, str>, _: Self, _: bool) -> bool {
        true
    }
    fn object(_: &mut (), _: (), _: bool) -> Option<Self> {
        Some(())
    }
}

struct Reader<'a, T: Tree<'a>> {
    text: &'a [u8],
    at: usize,
    strict: bool,
    scratch: T::Scratch,
    tree: PhantomData<T>,
}

impl<'a, T: Tree<'a>> Reader<'a, T> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: u32) -> Option<T> {
        self.skip_space();
        match self.peek()? {
            b'"' => {
                self.at += 1;
                let s = self.string()?;
                Some(T::string(&mut self.scratch, s))
            }
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b't' => self.word(b"true", T::boolean(true)),
            b'f' => self.word(b"false", T::boolean(false)),
            b'n' => self.word(b"null", T::null()),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8], node: T) -> Option<T> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| {
            self.at = end;
            node
        })
    }

    fn array(&mut self, depth: u32) -> Option<T> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        let mut items = T::items(&mut self.scratch);
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(T::array(&mut self.scratch, items));
        }
        loop {
            let item = self.value(depth)?;
            T::push(&mut self.scratch, &mut items, item);
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(T::array(&mut self.scratch, items));
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: u32) -> Option<T> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        let mut members = T::members(&mut self.scratch);
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
            return T::object(&mut self.scratch, members, self.strict);
        }
        loop {
            self.skip_space();
            if self.peek()? != b'"' {
                return None;
            }
            self.at += 1;
            let key = self.string()?;
            self.skip_space();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            let value = self.value(depth)?;
            if !T::insert(&mut self.scratch, &mut members, key, value, self.strict) {
                return None;
            }
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return T::object(&mut self.scratch, members, self.strict);
                }
                _ => return None,
            }
        }
    }

    /// A string's contents, `at` just past its opening quote; leaves `at` past the closing one.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.at;
        let mut escaped = false;
        let mut ascii = true;
        loop {
            self.at += crate::swar::plain_string_len(self.text.get(self.at..)?);
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    // The escaped byte is checked when the string is decoded; a `"` or `\` after
                    // the backslash must not end the scan here.
                    ascii &= self.text.get(self.at + 1)?.is_ascii();
                    self.at += 2;
                }
                // UTF-8, checked with the whole string below.
                0x80.. => {
                    ascii = false;
                    self.at += 1;
                }
                // A control character, which JSON strings may not hold raw.
                _ => return None,
            }
        }
        let raw = self.text.get(start..self.at)?;
        self.at += 1;
        let raw = if ascii {
            // SAFETY: every byte of `raw` was looked at above (by `plain_string_len`, or as a
            // backslash or the byte after one) and is ASCII, so `raw` is UTF-8.
            unsafe { std::str::from_utf8_unchecked(raw) }
        } else {
            std::str::from_utf8(raw).ok()?
        };
        if escaped {
            unescape(raw).map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(raw))
        }
    }

    /// A number as serde_json reads it: a non-negative integer that fits a `u64` here, any other
    /// (a sign, a fraction, an exponent) by serde_json's own number parser from its text alone.
    fn number(&mut self) -> Option<T> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let integer_end = self.at;
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        let token = self.text.get(start..self.at)?;
        if integer_end == self.at && token.first() != Some(&b'-') && token.len() <= 19 {
            // At most 19 digits: below 10^19, which fits a u64.
            let n = token.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            return Some(T::number(n.into()));
        }
        // The grammar is checked above, so the token is ASCII.
        let token = std::str::from_utf8(token).ok()?;
        serde_json::from_str::<Number>(token).ok().map(T::number)
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }
}

/// A string's text with its escapes decoded (`raw` between the quotes, valid UTF-8); `None` for
/// an escape JSON does not have or a surrogate escape that is not one of a pair.
fn unescape(raw: &str) -> Option<String> {
    unescape_as::<false>(raw)
}

/// [`unescape`]; `LOSSY` reads a surrogate escape that is not one of a pair as U+FFFD.
fn unescape_as<const LOSSY: bool>(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    // Escapes in a tool call's arguments come every few bytes: a plain byte search, not `find`'s
    // searcher set up for each.
    while let Some(slash) = rest.bytes().position(|b| b == b'\\') {
        out.push_str(rest.get(..slash)?);
        let escape = rest.get(slash + 1..)?;
        let (c, used) = match escape.as_bytes().first()? {
            b'"' => ('"', 1),
            b'\\' => ('\\', 1),
            b'/' => ('/', 1),
            b'b' => ('\u{8}', 1),
            b'f' => ('\u{c}', 1),
            b'n' => ('\n', 1),
            b'r' => ('\r', 1),
            b't' => ('\t', 1),
            b'u' => {
                let high = hex4(escape.get(1..5)?)?;
                let low = match escape.get(5..7) {
                    Some("\\u") => escape.get(7..11).and_then(hex4),
                    _ => None,
                };
                match (high, low) {
                    (0xD800..=0xDBFF, Some(low @ 0xDC00..=0xDFFF)) => {
                        let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                        (char::from_u32(code)?, 11)
                    }
                    (0xD800..=0xDFFF, _) if LOSSY => (char::REPLACEMENT_CHARACTER, 5),
                    _ => (char::from_u32(high)?, 5),
                }
            }
            _ => return None,
        };
        out.push(c);
        rest = escape.get(used..)?;
    }
    out.push_str(rest);
    Some(out)
}

/// Four hex digits.
fn hex4(digits: &str) -> Option<u32> {
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}
