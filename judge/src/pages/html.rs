//! HTML written so that nothing from the store can become markup: [`Html::raw`] takes only
//! `'static` literals (the page's own markup), every other value goes through [`Html::text`], which
//! escapes it for text and for quoted attributes alike, and links are built from percent-encoded
//! path segments ([`href`]).

use std::fmt::Write as _;

/// A page's markup, built in order.
#[derive(Debug, Default)]
pub struct Html(String);

impl Html {
    pub fn new() -> Self {
        Self::default()
    }

    /// Markup of the page itself: a literal, never a value.
    pub fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// A value, escaped: safe as element text and inside a double- or single-quoted attribute.
    pub fn text(&mut self, value: &str) -> &mut Self {
        for c in value.chars() {
            match c {
                '&' => self.0.push_str("&amp;"),
                '<' => self.0.push_str("&lt;"),
                '>' => self.0.push_str("&gt;"),
                '"' => self.0.push_str("&quot;"),
                '\'' => self.0.push_str("&#39;"),
                c => self.0.push(c),
            }
        }
        self
    }

    /// A number (or anything whose `Display` is plain), as text.
    pub fn num(&mut self, value: impl std::fmt::Display) -> &mut Self {
        let mut s = String::new();
        let _ = write!(s, "{value}");
        self.text(&s)
    }

    /// `<a href="…">text</a>`.
    pub fn link(&mut self, href: &str, text: &str) -> &mut Self {
        self.raw("<a href=\"")
            .text(href)
            .raw("\">")
            .text(text)
            .raw("</a>")
    }

    /// Appends another piece built the same way.
    pub fn push(&mut self, other: Html) -> &mut Self {
        self.0.push_str(&other.0);
        self
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// A path under `/ui` from segments, each percent-encoded (all but unreserved characters), so a
/// name with `/`, `?`, `#` or quotes stays one segment. Axum decodes them back in `Path`.
pub fn href(segments: &[&str]) -> String {
    let mut out = String::from("/ui");
    for segment in segments {
        out.push('/');
        for b in segment.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(b));
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cannot_open_markup_or_leave_an_attribute() {
        let mut h = Html::new();
        h.raw("<p title=\"")
            .text("\"><script>alert('x')</script>&")
            .raw("\">");
        assert_eq!(
            h.into_string(),
            "<p title=\"&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;\">"
        );
    }

    #[test]
    fn a_segment_stays_one_segment() {
        assert_eq!(
            href(&["agents", "a/b?c#d", "<x y>"]),
            "/ui/agents/a%2Fb%3Fc%23d/%3Cx%20y%3E"
        );
        assert_eq!(
            href(&["agents", "orders.v2_x-1"]),
            "/ui/agents/orders.v2_x-1"
        );
    }
}
