//! A small blocking HTTP/1.1 client for `--judge URL` and `--upstream URL` (plain `http://`: a
//! sidecar or a model server on loopback or behind a port-forward). One request per connection.

use std::fmt;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Where requests go: `http://HOST:PORT` with an optional path prefix.
#[derive(Debug, Clone)]
pub struct Endpoint {
    authority: String,
    prefix: String,
}

/// An answer.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Its body (chunked transfer decoded).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a URL is not one the client takes, or a request got no answer.
#[derive(Debug)]
pub enum HttpError {
    /// Not an `http://` URL.
    NotHttp(String),
    /// An `http://` URL with no host.
    NoHost(String),
    /// Connecting, sending or reading failed (`url` is the request's).
    Io {
        /// The URL asked.
        url: String,
        /// What failed.
        error: std::io::Error,
    },
    /// What came back is not an HTTP answer.
    NotAnAnswer(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotHttp(url) => write!(f, "{url}: only http:// URLs are supported"),
            Self::NoHost(url) => write!(f, "{url}: no host"),
            Self::Io { url, error } => write!(f, "{url}: {error}"),
            Self::NotAnAnswer(url) => write!(f, "{url}: not an HTTP answer"),
        }
    }
}

impl std::error::Error for HttpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// How long a request may take in all (a judge model or a real model answering).
const TIMEOUT: Duration = Duration::from_secs(120);

impl Endpoint {
    /// Parses `http://host:port[/prefix]`.
    pub fn parse(url: &str) -> Result<Self, HttpError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| HttpError::NotHttp(url.to_owned()))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(HttpError::NoHost(url.to_owned()));
        }
        let authority = if authority.contains(':') {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Self {
            authority,
            prefix: prefix.trim_end_matches('/').to_owned(),
        })
    }

    /// `POST` `body` to `path` (after the prefix) with `headers`.
    pub fn post(
        &self,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, HttpError> {
        let url = || format!("http://{}{path}", self.authority);
        let fail = |error: std::io::Error| HttpError::Io { url: url(), error };
        let mut conn = TcpStream::connect(&self.authority).map_err(fail)?;
        conn.set_read_timeout(Some(TIMEOUT)).map_err(fail)?;
        conn.set_write_timeout(Some(TIMEOUT)).map_err(fail)?;
        let mut head = format!(
            "POST {}{path} HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\nconnection: close\r\n",
            self.prefix,
            self.authority,
            body.len()
        );
        for (k, v) in headers {
            let skip = k.starts_with(':')
                || ["host", "content-length", "connection", "transfer-encoding"]
                    .contains(&k.to_ascii_lowercase().as_str());
            if !skip {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        head.push_str("\r\n");
        conn.write_all(head.as_bytes()).map_err(fail)?;
        conn.write_all(body).map_err(fail)?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).map_err(fail)?;
        parse_response(&raw).ok_or_else(|| HttpError::NotAnAnswer(url()))
    }
}

fn parse_response(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(raw.get(..end)?).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = raw.get(end + 4..)?;
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Some(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_line = std::str::from_utf8(rest.get(..line_end)?).ok()?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        rest = rest.get(line_end + 2..)?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_answer_is_decoded() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ndata\r\n3\r\n: x\r\n0\r\n\r\n";
        let r = parse_response(raw).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"data: x"[..]));
    }

    #[test]
    fn urls_take_a_prefix_and_refuse_https() {
        let e = Endpoint::parse("http://127.0.0.1:8181/base/").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.prefix.as_str()),
            ("127.0.0.1:8181", "/base")
        );
        assert!(Endpoint::parse("https://api.example.com").is_err());
    }
}
