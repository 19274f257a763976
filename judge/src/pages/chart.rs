//! A check's results over time as an inline SVG drawn on the server: one stacked bar per time
//! bucket (passed, failed, errored from the bottom), heights to scale with the fullest bucket. No
//! script and no style attribute: colours are presentation attributes, which the pages'
//! Content-Security-Policy allows. Each bar has a `<title>` with its counts, and the chart a text
//! alternative, for screen readers.

use super::html::Html;

pub const PASSED: &str = "#2e7d32";
pub const FAILED: &str = "#c62828";
pub const ERRORED: &str = "#8d6e00";

/// One bucket's counts and its label (its start, UTC).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bar {
    pub label: String,
    pub passed: i64,
    pub failed: i64,
    pub errored: i64,
}

impl Bar {
    fn total(&self) -> i64 {
        self.passed + self.failed + self.errored
    }
}

/// How big a chart is drawn.
#[derive(Debug, Clone, Copy)]
pub enum Size {
    /// A row's small chart, without axes.
    Small,
    /// A page's chart, with the largest count and the window's ends written out.
    Large,
}

/// The SVG of `bars`, described by `label` (what it shows, for the text alternative).
pub fn bars(label: &str, bars: &[Bar], size: Size) -> Html {
    let (width, height, left, bottom) = match size {
        Size::Small => (240_i64, 36_i64, 0_i64, 0_i64),
        Size::Large => (720, 200, 40, 20),
    };
    let plot_w = width - left;
    let plot_h = height - bottom;
    let max = bars.iter().map(Bar::total).max().unwrap_or(0).max(1);
    let n = i64::try_from(bars.len()).unwrap_or(1).max(1);
    let slot = plot_w / n;
    let bar_w = (slot - 2).max(1);
    let (passed, failed, errored) = bars.iter().fold((0, 0, 0), |(p, f, e), b| {
        (p + b.passed, f + b.failed, e + b.errored)
    });

    let mut h = Html::new();
    h.raw("<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" class=\"chart\" width=\"")
        .num(width)
        .raw("\" height=\"")
        .num(height)
        .raw("\" viewBox=\"0 0 ")
        .num(width)
        .raw(" ")
        .num(height)
        .raw("\" aria-label=\"")
        .text(&format!(
            "{label}: {passed} passed, {failed} failed, {errored} errored"
        ))
        .raw("\">");
    h.raw("<rect x=\"")
        .num(left)
        .raw("\" y=\"0\" width=\"")
        .num(plot_w)
        .raw("\" height=\"")
        .num(plot_h)
        .raw("\" fill=\"#f5f5f5\"/>");
    for (i, bar) in (0_i64..).zip(bars) {
        let x = left + i * slot + 1;
        h.raw("<g><title>")
            .text(&format!(
                "{}: {} passed, {} failed, {} errored",
                bar.label, bar.passed, bar.failed, bar.errored
            ))
            .raw("</title>");
        // Bottom up: passed, failed, errored; each at least 1 px when it has any result.
        let mut y = plot_h;
        for (count, colour) in [
            (bar.passed, PASSED),
            (bar.failed, FAILED),
            (bar.errored, ERRORED),
        ] {
            if count == 0 {
                continue;
            }
            let seg = (count * plot_h / max).max(1);
            y -= seg;
            h.raw("<rect x=\"")
                .num(x)
                .raw("\" y=\"")
                .num(y)
                .raw("\" width=\"")
                .num(bar_w)
                .raw("\" height=\"")
                .num(seg)
                .raw("\" fill=\"")
                .text(colour)
                .raw("\"/>");
        }
        // An empty bucket still has its tooltip's target.
        if bar.total() == 0 {
            h.raw("<rect x=\"")
                .num(x)
                .raw("\" y=\"0\" width=\"")
                .num(bar_w)
                .raw("\" height=\"")
                .num(plot_h)
                .raw("\" fill=\"transparent\"/>");
        }
        h.raw("</g>");
    }
    if let Size::Large = size {
        h.raw("<text x=\"")
            .num(left - 4)
            .raw("\" y=\"12\" text-anchor=\"end\" font-size=\"12\" fill=\"#222\">")
            .num(max)
            .raw("</text><text x=\"")
            .num(left - 4)
            .raw("\" y=\"")
            .num(plot_h)
            .raw("\" text-anchor=\"end\" font-size=\"12\" fill=\"#222\">0</text>");
        if let (Some(first), Some(last)) = (bars.first(), bars.last()) {
            h.raw("<text x=\"")
                .num(left)
                .raw("\" y=\"")
                .num(height - 4)
                .raw("\" font-size=\"12\" fill=\"#222\">")
                .text(&first.label)
                .raw("</text><text x=\"")
                .num(width)
                .raw("\" y=\"")
                .num(height - 4)
                .raw("\" text-anchor=\"end\" font-size=\"12\" fill=\"#222\">")
                .text(&last.label)
                .raw("</text>");
        }
    }
    h.raw("</svg>");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(label: &str, passed: i64, failed: i64, errored: i64) -> Bar {
        Bar {
            label: label.into(),
            passed,
            failed,
            errored,
        }
    }

    #[test]
    fn bars_stack_to_scale_and_say_their_counts() {
        let svg = bars(
            "no-passwords",
            &[
                bar("10:00", 3, 1, 0),
                bar("11:00", 0, 0, 0),
                bar("12:00", 0, 4, 4),
            ],
            Size::Small,
        )
        .into_string();
        assert!(svg.contains("aria-label=\"no-passwords: 3 passed, 5 failed, 4 errored\""));
        assert!(svg.contains("<title>10:00: 3 passed, 1 failed, 0 errored</title>"));
        // The fullest bucket (8) fills the 36 px: 4 failed = 18 px, 4 errored = 18 px above it.
        assert!(svg.contains("y=\"18\" width=\"78\" height=\"18\" fill=\"#c62828\""));
        assert!(svg.contains("y=\"0\" width=\"78\" height=\"18\" fill=\"#8d6e00\""));
        assert!(!svg.contains("style"));
    }

    #[test]
    fn labels_are_escaped() {
        let svg = bars("<script>", &[bar("<b>", 1, 0, 0)], Size::Large).into_string();
        assert!(!svg.contains("<script>") && !svg.contains("<b>"));
        assert!(svg.contains("&lt;script&gt;: 1 passed"));
    }
}
