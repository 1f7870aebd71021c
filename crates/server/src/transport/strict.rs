//! What an HTTP request must look like before its body is read: headers that a proxy and this server
//! must read alike appear once, a POST says its body is JSON, and the client accepts a form the reply
//! can take. Each check says exactly what was wrong.

use axum::http::{header, HeaderMap};

/// Headers that decide what a request is or who sends it, with the spelling used in messages. Sent
/// twice, a proxy that reads the first and this server (or another proxy) that reads the last would
/// act on different requests, so each may appear once.
const SINGLE: [(&str, &str); 5] = [
    ("mcp-method", "Mcp-Method"),
    ("mcp-name", "Mcp-Name"),
    ("mcp-session-id", "Mcp-Session-Id"),
    ("mcp-protocol-version", "MCP-Protocol-Version"),
    ("authorization", "Authorization"),
];

/// The first of [`SINGLE`] that `headers` holds more than once, as a message.
pub(crate) fn repeated_header(headers: &HeaderMap) -> Option<String> {
    SINGLE.iter().find_map(|(name, shown)| {
        (headers.get_all(*name).iter().nth(1).is_some())
            .then(|| format!("the {shown} header appears more than once; send it once"))
    })
}

/// Most headers a request may have; hyper is set to read more, so that this answer (431 with a
/// JSON-RPC error) is ours rather than hyper's bare one.
pub(crate) const MAX_HEADERS: usize = 100;

/// Most bytes of header names and values a request may have.
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Headers hyper reads at most (beyond them, its own bare 431).
pub(crate) const HYPER_MAX_HEADERS: usize = 4 * MAX_HEADERS;

/// Why a request's headers are too many or too large, if they are.
pub(crate) fn oversized_headers(headers: &HeaderMap) -> Option<String> {
    let count = headers.len();
    if count > MAX_HEADERS {
        return Some(format!(
            "{count} headers; at most {MAX_HEADERS} are accepted"
        ));
    }
    let bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    (bytes > MAX_HEADER_BYTES)
        .then(|| format!("{bytes} bytes of headers; at most {MAX_HEADER_BYTES} are accepted"))
}

/// Why a POST body is not declared as JSON, if it is not: `Content-Type` must be `application/json`,
/// parameters (such as `charset=utf-8`) allowed.
pub(crate) fn content_type_problem(headers: &HeaderMap) -> Option<String> {
    let mut all = headers.get_all(header::CONTENT_TYPE).iter();
    let Some(value) = all.next() else {
        return Some("missing Content-Type: send application/json".into());
    };
    if all.next().is_some() {
        return Some("the Content-Type header appears more than once; send it once".into());
    }
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or("").trim();
    (!essence.eq_ignore_ascii_case("application/json"))
        .then(|| format!("Content-Type must be application/json, got {text:?}"))
}

/// The reply forms a client accepts, from its `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Accepts {
    /// A JSON body (`application/json`).
    pub json: bool,
    /// An SSE stream (`text/event-stream`).
    pub sse: bool,
}

impl Accepts {
    /// Reads every `Accept` header. None at all accepts anything (RFC 9110 §12.5.1); a media range
    /// with `q=0` is refused, also through a wildcard.
    pub(crate) fn of(headers: &HeaderMap) -> Accepts {
        let mut values = headers.get_all(header::ACCEPT).iter().peekable();
        if values.peek().is_none() {
            return Accepts {
                json: true,
                sse: true,
            };
        }
        // The most specific range that names a type decides for it (RFC 9110 §12.5.1).
        let mut json: Option<(u8, bool)> = None;
        let mut sse: Option<(u8, bool)> = None;
        for value in values {
            let text = String::from_utf8_lossy(value.as_bytes());
            for range in text.split(',') {
                let mut parts = range.split(';');
                let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
                let allowed = parts
                    .filter_map(|p| p.split_once('='))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                    .map(|(_, q)| q.trim().parse::<f32>().map(|q| q > 0.0).unwrap_or(false))
                    .unwrap_or(true);
                let consider = |slot: &mut Option<(u8, bool)>, specificity: u8| {
                    if slot.is_none_or(|(s, _)| specificity > s) {
                        *slot = Some((specificity, allowed));
                    }
                };
                match media.as_str() {
                    "application/json" => consider(&mut json, 2),
                    "text/event-stream" => consider(&mut sse, 2),
                    "application/*" => consider(&mut json, 1),
                    "text/*" => consider(&mut sse, 1),
                    "*/*" => {
                        consider(&mut json, 0);
                        consider(&mut sse, 0);
                    }
                    _ => {}
                }
            }
        }
        Accepts {
            json: json.is_some_and(|(_, ok)| ok),
            sse: sse.is_some_and(|(_, ok)| ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn each_deciding_header_may_appear_once() {
        assert_eq!(repeated_header(&headers(&[("mcp-method", "ping")])), None);
        let twice = headers(&[("Mcp-Session-Id", "a"), ("mcp-session-id", "b")]);
        assert_eq!(
            repeated_header(&twice).as_deref(),
            Some("the Mcp-Session-Id header appears more than once; send it once")
        );
        let auth = headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]);
        assert!(repeated_header(&auth).unwrap().contains("Authorization"));
        // Headers that decide nothing may repeat.
        assert_eq!(
            repeated_header(&headers(&[("x-a", "1"), ("x-a", "2")])),
            None
        );
    }

    #[test]
    fn the_body_must_be_declared_json() {
        assert_eq!(
            content_type_problem(&headers(&[("content-type", "application/json")])),
            None
        );
        assert_eq!(
            content_type_problem(&headers(&[(
                "content-type",
                "Application/JSON; charset=utf-8"
            )])),
            None
        );
        for bad in [
            "text/plain",
            "application/jsonx",
            "application/json-seq",
            "",
        ] {
            let p = content_type_problem(&headers(&[("content-type", bad)])).unwrap();
            assert!(
                p.starts_with("Content-Type must be application/json"),
                "{bad}: {p}"
            );
        }
        assert!(content_type_problem(&HeaderMap::new())
            .unwrap()
            .starts_with("missing"));
    }

    #[test]
    fn accept_is_read_with_wildcards_and_q_zero() {
        let of = |v: &str| Accepts::of(&headers(&[("accept", v)]));
        let both = Accepts {
            json: true,
            sse: true,
        };
        assert_eq!(Accepts::of(&HeaderMap::new()), both);
        assert_eq!(of("application/json, text/event-stream"), both);
        assert_eq!(of("*/*"), both);
        assert_eq!(
            of("text/event-stream"),
            Accepts {
                json: false,
                sse: true
            }
        );
        assert_eq!(
            of("application/json"),
            Accepts {
                json: true,
                sse: false
            }
        );
        assert_eq!(
            of("application/*;q=0.5"),
            Accepts {
                json: true,
                sse: false
            }
        );
        assert_eq!(
            of("*/*, application/json;q=0"),
            Accepts {
                json: false,
                sse: true
            }
        );
        assert_eq!(
            of("text/html"),
            Accepts {
                json: false,
                sse: false
            }
        );
        assert_eq!(
            of("application/json;q=bogus"),
            Accepts {
                json: false,
                sse: false
            }
        );
    }
}
