//! A JSON array of objects sent piece by piece: an incremental decoder that gives each element as
//! it completes, the same elements however the bytes are split.
//!
//! Google's `:streamGenerateContent` without `alt=sse` answers so: one JSON array whose elements
//! (one `GenerateContentResponse` each) are written as the model produces them, `[{…}` first,
//! then `,\r\n{…}` per element, then `]` (symfony/ai#1988, kgateway-dev/kgateway#10804,
//! langchain-ai/langchainjs#2594; <https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent>).
//! The decoder reads the array's structure only: between elements JSON whitespace (RFC 8259 §2),
//! each element an object whose end is found by its brackets outside strings (escapes read), its
//! text given as it came for the reader to parse. Anything else (bytes before `[` or after `]`, an
//! element that is not an object, a missing `,`, brackets that do not pair, a stream that ends
//! before `]`, an element longer than the limit or not UTF-8) cannot be read.

/// Why bytes cannot be read as one JSON array of objects. Never quotes the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayError {
    /// Not the array's structure (see the module's note).
    NotArray,
    /// An element longer than the decoder's limit.
    TooLong,
    /// An element not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for ArrayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotArray => f.write_str("the stream is not one JSON array of objects"),
            Self::TooLong => f.write_str("an element of the array is longer than the limit"),
            Self::NotUtf8 => f.write_str("an element of the array is not UTF-8"),
        }
    }
}

impl std::error::Error for ArrayError {}

/// What the decoder read: an element (its JSON text as it came), or the array's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Element(String),
    End,
}

/// Where the decoder stands between elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before `[`.
    Start,
    /// After `[`: an element or `]`.
    Open,
    /// Inside an element.
    Element,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After `,`: an element.
    AfterComma,
    /// After `]`: whitespace alone.
    Ended,
}

/// Decodes a JSON array of objects pushed in chunks of any size.
#[derive(Debug, Clone)]
pub struct Decoder {
    at: At,
    /// The element so far.
    element: Vec<u8>,
    /// The closing brackets the element still owes, innermost last.
    closers: Vec<u8>,
    in_string: bool,
    /// The last byte in a string was a `\` that escapes the next.
    escaped: bool,
    limit: usize,
}

/// JSON's insignificant whitespace (RFC 8259 §2).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Decoder {
    /// A decoder refusing any element longer than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            at: At::Start,
            element: Vec::new(),
            closers: Vec::new(),
            in_string: false,
            escaped: false,
            limit,
        }
    }

    /// Reads `bytes` up to the end of the first item it completes, into `out`: how many of `bytes`
    /// it read (all of them when it completed none). The rest is for a later push; the items are
    /// the same however a stream is split.
    pub fn push_item(&mut self, bytes: &[u8], out: &mut Vec<Item>) -> Result<usize, ArrayError> {
        let mut read = 0;
        while let Some(rest) = bytes.get(read..).filter(|r| !r.is_empty()) {
            if self.at == At::Element {
                let (used, done) = self.element_bytes(rest)?;
                read += used;
                if done {
                    let element = std::mem::take(&mut self.element);
                    let text = String::from_utf8(element).map_err(|_| ArrayError::NotUtf8)?;
                    out.push(Item::Element(text));
                    self.at = At::AfterElement;
                    return Ok(read);
                }
                continue;
            }
            let Some(&b) = rest.first() else { break };
            read += 1;
            if is_space(b) {
                continue;
            }
            match (self.at, b) {
                (At::Start, b'[') => self.at = At::Open,
                (At::Open | At::AfterComma, b'{') => {
                    self.at = At::Element;
                    self.element.push(b);
                    self.closers.push(b'}');
                }
                (At::AfterElement, b',') => self.at = At::AfterComma,
                (At::Open | At::AfterElement, b']') => {
                    self.at = At::Ended;
                    out.push(Item::End);
                    return Ok(read);
                }
                _ => return Err(ArrayError::NotArray),
            }
        }
        Ok(bytes.len())
    }

    /// An element's bytes from the start of `bytes`: how many belong to it, and whether it ended.
    fn element_bytes(&mut self, bytes: &[u8]) -> Result<(usize, bool), ArrayError> {
        let mut end = None;
        for (i, &b) in bytes.iter().enumerate() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' => self.closers.push(b'}'),
                b'[' => self.closers.push(b']'),
                b'}' | b']' => {
                    if self.closers.pop() != Some(b) {
                        return Err(ArrayError::NotArray);
                    }
                    if self.closers.is_empty() {
                        end = Some(i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        let used = end.unwrap_or(bytes.len());
        if self.element.len().saturating_add(used) > self.limit {
            return Err(ArrayError::TooLong);
        }
        self.element
            .extend_from_slice(bytes.get(..used).unwrap_or(bytes));
        Ok((used, end.is_some()))
    }

    /// The end of the stream: an error unless the array ended.
    pub fn finish(&mut self) -> Result<(), ArrayError> {
        if self.at == At::Ended {
            Ok(())
        } else {
            Err(ArrayError::NotArray)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item of `bytes` pushed in the pieces `cuts` makes, then the end.
    fn read_split(bytes: &[u8], cuts: &[usize], limit: usize) -> Result<Vec<Item>, ArrayError> {
        let mut decoder = Decoder::new(limit);
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([bytes.len()].iter()) {
            let mut piece = &bytes[from..to];
            while !piece.is_empty() {
                let read = decoder.push_item(piece, &mut out)?;
                assert!(read > 0 && read <= piece.len());
                piece = &piece[read..];
            }
            from = to;
        }
        decoder.finish()?;
        Ok(out)
    }

    fn read(bytes: &[u8]) -> Result<Vec<Item>, ArrayError> {
        read_split(bytes, &[], 1 << 16)
    }

    fn elements(texts: &[&str]) -> Vec<Item> {
        texts
            .iter()
            .map(|t| Item::Element((*t).to_owned()))
            .chain([Item::End])
            .collect()
    }

    /// Elements with strings holding escaped quotes, backslashes and brackets, and non-ASCII text.
    const TRICKY: [&str; 3] = [
        r#"{"candidates": [{"content": {"parts": [{"text": "a \"}]\" b \\"}]}}]}"#,
        r#"{"t": "[{\\\"", "n": [1, {"x": "]"}], "u": "日本 é"}"#,
        r#"{}"#,
    ];

    #[test]
    fn each_element_is_read_as_it_came_under_every_split() {
        let stream = format!(
            "[{}\n,\r\n{}\n,\r\n{}\n]\r\n",
            TRICKY[0], TRICKY[1], TRICKY[2]
        );
        let bytes = stream.as_bytes();
        let want = elements(&TRICKY);
        assert_eq!(read(bytes), Ok(want.clone()));
        for i in 0..=bytes.len() {
            assert_eq!(read_split(bytes, &[i], 1 << 16), Ok(want.clone()), "at {i}");
            for j in i..=bytes.len() {
                assert_eq!(
                    read_split(bytes, &[i, j], 1 << 16),
                    Ok(want.clone()),
                    "at {i}, {j}"
                );
            }
        }
        let ones: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(read_split(bytes, &ones, 1 << 16), Ok(want));
    }

    #[test]
    fn the_vendors_spacing_and_an_empty_array_read() {
        assert_eq!(read(b"[]"), Ok(vec![Item::End]));
        assert_eq!(read(b" \r\n[ \t]\n"), Ok(vec![Item::End]));
        assert_eq!(
            read(b"[{\"a\":1}\n,\r\n{\"b\":[2]}\n]"),
            Ok(elements(&["{\"a\":1}", "{\"b\":[2]}"]))
        );
    }

    #[test]
    fn one_push_reads_up_to_the_first_item_it_completes() {
        let mut decoder = Decoder::new(1 << 16);
        let mut out = Vec::new();
        let bytes = b"[{\"a\":1},{\"b\":2}]";
        assert_eq!(decoder.push_item(bytes, &mut out), Ok(8));
        assert_eq!(out, vec![Item::Element("{\"a\":1}".into())]);
        assert_eq!(decoder.push_item(&bytes[8..], &mut out), Ok(8));
        assert_eq!(decoder.push_item(&bytes[16..], &mut out), Ok(1));
        assert_eq!(out.last(), Some(&Item::End));
    }

    #[test]
    fn anything_but_one_array_of_objects_is_not_read() {
        for bytes in [
            &b""[..],
            b"   ",
            b"x[{}]",
            b"data: {}\n\n",
            b"{}",
            b"[{}] x",
            b"[{}][]",
            b"[{}",
            b"[{},",
            b"[{\"a\": \"]}",
            b"[{}{}]",
            b"[{},]",
            b"[,{}]",
            b"[1]",
            b"[\"s\"]",
            b"[[{}]]",
            b"[null]",
            b"[{},{}",
            b"[{\"a\": [}]",
            b"[{\"a\": {]}]",
            b"\xef\xbb\xbf[{}]",
        ] {
            assert!(read(bytes).is_err(), "{:?}", String::from_utf8_lossy(bytes));
        }
        assert_eq!(read(b"[{\"a\": \"\xff\"}]"), Err(ArrayError::NotUtf8));
    }

    #[test]
    fn an_element_longer_than_the_limit_is_not_read_however_split() {
        let bytes = br#"[{"text": "0123456789"}]"#;
        let element = bytes.len() - 2;
        assert!(read_split(bytes, &[], element).is_ok());
        for i in 0..=bytes.len() {
            assert_eq!(
                read_split(bytes, &[i], element - 1),
                Err(ArrayError::TooLong),
                "at {i}"
            );
        }
    }
}
