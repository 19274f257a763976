//! JUnit XML (the format CI systems read test reports in): one `<testsuite>` per case file, one
//! `<testcase>` per case, `<failure>` for unmet expectations, `<error>` for a case that could not run.

use std::fmt::Write;

use crate::cases::CaseError;
use crate::drive::TurnError;

/// One case's result.
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Seconds it took.
    pub seconds: f64,
    /// Unmet expectations (a failure) or why it could not run (an error).
    pub verdict: CaseVerdict,
}

/// How a case ended.
pub enum CaseVerdict {
    /// Every expectation held.
    Passed,
    /// These expectations did not hold; then what happened.
    Failed(Vec<String>, String),
    /// The case could not run as written.
    Error(TurnError),
}

/// One case file's results.
pub struct FileResult {
    /// The file, as given.
    pub file: String,
    /// Its cases, in order; empty with `error` when the file could not be read.
    pub cases: Vec<CaseResult>,
    /// Why the file could not be read.
    pub error: Option<CaseError>,
}

/// Escapes text for an XML attribute or element (and drops characters XML 1.0 cannot carry).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The report as JUnit XML.
pub fn write(files: &[FileResult], wasm: &str) -> String {
    let count = |f: &FileResult, p: fn(&CaseVerdict) -> bool| {
        f.cases.iter().filter(|c| p(&c.verdict)).count()
    };
    let failed = |v: &CaseVerdict| matches!(v, CaseVerdict::Failed(..));
    let errored = |v: &CaseVerdict| matches!(v, CaseVerdict::Error(_));
    let tests: usize = files
        .iter()
        .map(|f| f.cases.len().max(usize::from(f.error.is_some())))
        .sum();
    let failures: usize = files.iter().map(|f| count(f, failed)).sum();
    let errors: usize = files
        .iter()
        .map(|f| count(f, errored) + usize::from(f.error.is_some()))
        .sum();
    let seconds: f64 = files.iter().flat_map(|f| &f.cases).map(|c| c.seconds).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"livecheck test\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\">"
    );
    for f in files {
        let secs: f64 = f.cases.iter().map(|c| c.seconds).sum();
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{secs:.3}\">",
            esc(&f.file),
            f.cases.len().max(usize::from(f.error.is_some())),
            count(f, failed),
            count(f, errored) + usize::from(f.error.is_some()),
        );
        let _ = writeln!(
            x,
            "    <properties><property name=\"wasm\" value=\"{}\"/></properties>",
            esc(wasm)
        );
        if let Some(e) = &f.error {
            let _ = writeln!(
                x,
                "    <testcase name=\"(case file)\" classname=\"{}\"><error message=\"{}\" type=\"case_file\"/></testcase>",
                esc(&f.file),
                esc(&e.to_string())
            );
        }
        for c in &f.cases {
            let _ = write!(
                x,
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
                esc(&c.name),
                esc(&f.file),
                c.seconds
            );
            match &c.verdict {
                CaseVerdict::Passed => x.push_str("/>\n"),
                CaseVerdict::Failed(unmet, happened) => {
                    let _ = writeln!(
                        x,
                        ">\n      <failure message=\"{}\" type=\"expectation\">{}\nhappened: {}</failure>\n    </testcase>",
                        esc(unmet.first().map(String::as_str).unwrap_or_default()),
                        esc(&unmet.join("\n")),
                        esc(happened)
                    );
                }
                CaseVerdict::Error(e) => {
                    let _ = writeln!(
                        x,
                        ">\n      <error message=\"{}\" type=\"case\"/>\n    </testcase>",
                        esc(&e.to_string())
                    );
                }
            }
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            esc("a<b & \"c\"\u{1}"),
            "a&lt;b &amp; &quot;c&quot;\u{fffd}"
        );
    }
}
