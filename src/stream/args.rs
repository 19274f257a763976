//! A tool call's JSON arguments read as they stream: the text of their values, decoded.
//!
//! The model writes arguments as JSON text in fragments cut anywhere (inside a key, an escape, or
//! between the two halves of a surrogate pair). This reader is a small state machine over those
//! fragments: every value starts with `"\n"` (as `api`'s non-streamed reader separates a call
//! and its values), string values are decoded (`\uXXXX` and surrogate pairs included), numbers,
//! `true`, `false` and `null` are read as written, keys are skipped. For each character of text it
//! gives where the character's JSON starts in the fragment, so a fragment can be cut just before
//! any character. Text that is not JSON is read leniently (a run of non-structural characters
//! outside strings is a value) and never fails.

/// What one fragment says: its decoded text, and for each character of it the byte offset in the
/// fragment where its JSON starts.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub text: String,
    pub starts: Vec<usize>,
    /// The fragment ends inside a character (an escape, or between the halves of a surrogate
    /// pair): the byte offset where that character's JSON starts.
    pub pending: Option<usize>,
}

#[derive(Debug, Default)]
pub(crate) struct ArgsReader {
    /// Open containers, innermost last: `true` for an object.
    stack: Vec<bool>,
    expect_key: bool,
    state: State,
    /// A high surrogate waiting for its low half, and where it started.
    high: Option<(u32, usize)>,
    /// Where the escape being read started.
    escape_at: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Outside,
    Bare,
    Str {
        key: bool,
    },
    Escape {
        key: bool,
    },
    Hex {
        key: bool,
        value: u32,
        digits: u8,
    },
}

impl ArgsReader {
    pub(crate) fn read(&mut self, fragment: &str) -> Decoded {
        let mut out = Decoded::default();
        // A character begun in an earlier fragment starts, for this one, at its first byte.
        self.escape_at = 0;
        if let Some((unit, _)) = self.high {
            self.high = Some((unit, 0));
        }
        for (at, c) in fragment.char_indices() {
            if self.state == State::Bare && is_delimiter(c) {
                self.state = State::Outside;
            }
            self.step(c, at, &mut out);
        }
        out.pending = match self.state {
            State::Escape { .. } | State::Hex { .. } => {
                Some(self.high.map_or(self.escape_at, |(_, at)| at))
            }
            _ => self.high.map(|(_, at)| at),
        };
        out
    }

    fn step(&mut self, c: char, at: usize, out: &mut Decoded) {
        match self.state {
            State::Outside => match c {
                '{' => {
                    self.stack.push(true);
                    self.expect_key = true;
                }
                '[' => {
                    self.stack.push(false);
                    self.expect_key = false;
                }
                '}' | ']' => {
                    self.stack.pop();
                    self.expect_key = false;
                }
                ',' => self.expect_key = self.stack.last() == Some(&true),
                ':' => self.expect_key = false,
                '"' => {
                    let key = self.expect_key;
                    if !key {
                        emit(out, '\n', at);
                    }
                    self.state = State::Str { key };
                }
                c if c.is_whitespace() => {}
                c => {
                    emit(out, '\n', at);
                    emit(out, c, at);
                    self.state = State::Bare;
                }
            },
            State::Bare => emit(out, c, at),
            State::Str { key } => match c {
                '"' => {
                    self.lone_high(key, out);
                    self.state = State::Outside;
                    if key {
                        self.expect_key = false;
                    }
                }
                '\\' => {
                    self.escape_at = at;
                    self.state = State::Escape { key };
                }
                c => {
                    self.lone_high(key, out);
                    if !key {
                        emit(out, c, at);
                    }
                }
            },
            State::Escape { key } => {
                self.state = State::Str { key };
                let decoded = match c {
                    'u' => {
                        self.state = State::Hex {
                            key,
                            value: 0,
                            digits: 0,
                        };
                        return;
                    }
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    other => other,
                };
                self.lone_high(key, out);
                if !key {
                    emit(out, decoded, self.escape_at);
                }
            }
            State::Hex { key, value, digits } => {
                let Some(digit) = c.to_digit(16) else {
                    // Not an escape after all: read the character as text.
                    self.state = State::Str { key };
                    self.lone_high(key, out);
                    if !key {
                        emit(out, char::REPLACEMENT_CHARACTER, self.escape_at);
                    }
                    return self.step(c, at, out);
                };
                let value = value * 16 + digit;
                if digits < 3 {
                    self.state = State::Hex {
                        key,
                        value,
                        digits: digits + 1,
                    };
                    return;
                }
                self.state = State::Str { key };
                self.unit(key, value, out);
            }
        }
    }

    /// One complete `\uXXXX` code unit.
    fn unit(&mut self, key: bool, unit: u32, out: &mut Decoded) {
        let at = self.escape_at;
        match unit {
            0xD800..=0xDBFF => {
                self.lone_high(key, out);
                self.high = Some((unit, at));
            }
            0xDC00..=0xDFFF => match self.high.take() {
                Some((high, high_at)) => {
                    let c = 0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00);
                    if !key {
                        emit(out, char::from_u32(c).unwrap_or('\u{FFFD}'), high_at);
                    }
                }
                None if !key => emit(out, char::REPLACEMENT_CHARACTER, at),
                None => {}
            },
            _ => {
                self.lone_high(key, out);
                if !key {
                    emit(out, char::from_u32(unit).unwrap_or('\u{FFFD}'), at);
                }
            }
        }
    }

    /// A high surrogate not followed by its low half reads as U+FFFD, as serde_json's lossless
    /// reader would refuse it; either way it is no character of the text.
    fn lone_high(&mut self, key: bool, out: &mut Decoded) {
        if let Some((_, at)) = self.high.take() {
            if !key {
                emit(out, char::REPLACEMENT_CHARACTER, at);
            }
        }
    }
}

fn emit(out: &mut Decoded, c: char, at: usize) {
    out.text.push(c);
    out.starts.push(at);
}

fn is_delimiter(c: char) -> bool {
    matches!(c, '{' | '}' | '[' | ']' | ',' | ':' | '"') || c.is_whitespace()
}

#[cfg(test)]
mod tests {

    use super::*;

    fn read_in(pieces: &[&str]) -> String {
        let mut reader = ArgsReader::default();
        pieces.iter().map(|p| reader.read(p).text).collect()
    }

    const ARGS: &str = r#"{"iban": "NL91\u0041BNA0417164300", "amount": 12.5, "ok": true, "n": null, "lines": ["a\nb", "\ud83d\ude00 é"], "k\"ey": {"x": "日本"}}"#;

    #[test]
    fn values_are_decoded_and_keys_skipped() {
        assert_eq!(
            read_in(&[ARGS]),
            "\nNL91ABNA0417164300\n12.5\ntrue\nnull\na\nb\n😀 é\n日本"
        );
    }

    #[test]
    fn any_split_reads_the_same() {
        let whole = read_in(&[ARGS]);
        let cuts: Vec<usize> = ARGS.char_indices().map(|(i, _)| i).collect();
        for &i in &cuts {
            for &j in cuts.iter().filter(|&&j| j >= i) {
                let parts = [&ARGS[..i], &ARGS[i..j], &ARGS[j..]];
                assert_eq!(read_in(&parts), whole, "{i} {j}");
            }
        }
    }

    #[test]
    fn each_character_knows_where_its_json_starts() {
        let mut reader = ArgsReader::default();
        let d = reader.read(r#"{"a": "x\u00e9\ud83d"#);
        assert_eq!(d.text, "\nxé");
        assert_eq!(d.starts, vec![6, 7, 8]);
        assert_eq!(d.pending, Some(14));
        let d = reader.read(r#"\ude00"}"#);
        assert_eq!(d.text, "😀");
        assert_eq!(d.starts, vec![0]);
        assert_eq!(d.pending, None);
    }

    #[test]
    fn text_that_is_not_json_is_read_leniently() {
        assert_eq!(read_in(&["rm -rf /"]), "\nrm\n-rf\n/");
    }
}
