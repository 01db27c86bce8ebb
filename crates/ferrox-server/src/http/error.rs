//! OpenAI-format errors, and the checks every endpoint makes before its own: the API key and
//! the JSON body.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

use super::{AppState, Shared};
use crate::api::{ErrorBody, ErrorDetail};

/// What a generation whose events stopped before its end says (a 500, or a stream's error).
pub(super) const UNFINISHED: &str = "generation ended unexpectedly";

/// An OpenAI-format error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    pub(super) retry_after: Option<u32>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        let kind = match status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            429 | 503 => "server_overloaded",
            501 => "not_supported_error",
            500..=599 => "server_error",
            _ => "invalid_request_error",
        };
        ApiError {
            status,
            body: ErrorBody {
                error: ErrorDetail {
                    message: message.into(),
                    kind,
                    param: None,
                    code: None,
                },
            },
            retry_after: None,
        }
    }
    pub(super) fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    /// A generation the engine failed (or lost): the request's 500.
    pub(super) fn failed(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
    /// A generation whose events stopped before its end.
    pub(super) fn unfinished() -> ApiError {
        ApiError::failed(UNFINISHED)
    }
    /// The same error, its message led by `p` (what it was about).
    pub(super) fn prefix(mut self, p: &str) -> ApiError {
        self.body.error.message = format!("{p}{}", self.body.error.message);
        self
    }
    pub(super) fn param(mut self, p: impl Into<String>) -> ApiError {
        self.body.error.param = Some(p.into());
        self
    }
    pub(super) fn code(mut self, c: &'static str) -> ApiError {
        self.body.error.code = Some(c);
        self
    }
}

impl ApiError {
    /// Ollama's error form: `{"error": "message"}`.
    pub(super) fn ollama(self) -> Response {
        let mut r = (
            self.status,
            Json(serde_json::json!({"error": self.body.error.message})),
        )
            .into_response();
        self.add_retry(&mut r);
        r
    }

    /// The Anthropic Messages API's form: `{"type": "error", "error": {"type", "message"}}`.
    pub(super) fn anthropic(self) -> Response {
        let mut r = (self.status, Json(self.anthropic_body())).into_response();
        self.add_retry(&mut r);
        r
    }

    pub(super) fn anthropic_body(&self) -> serde_json::Value {
        let kind = match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        };
        serde_json::json!({"type": "error", "error": {"type": kind, "message": self.body.error.message}})
    }

    fn add_retry(&self, r: &mut Response) {
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

pub(super) fn check_auth(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    auth(&state.options, headers)
}

/// [`check_auth`] against the server's options.
pub(super) fn auth(options: &super::Options, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &options.api_key else {
        return Ok(());
    };
    // Bearer (OpenAI, Ollama) or `x-api-key` (Anthropic's clients).
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let x_key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let matches = |given: Option<&str>| given.is_some_and(|g| same_secret(g, key));
    if matches(bearer) || matches(x_key) {
        Ok(())
    } else {
        Err(
            ApiError::new(StatusCode::UNAUTHORIZED, "missing or invalid API key")
                .code("invalid_api_key"),
        )
    }
}

/// Compares a presented key with the configured one in time independent of where they
/// differ (a timing side channel would reveal the key byte by byte).
fn same_secret(given: &str, key: &str) -> bool {
    let (a, b) = (given.as_bytes(), key.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, kb) in b.iter().enumerate() {
        diff |= a.get(i).copied().unwrap_or(0) ^ kb;
    }
    std::hint::black_box(diff) == 0
}

/// Without an API key, requests must name the server by an IP address, `localhost` or an
/// allowed name: a hostile web page can point its own domain at 127.0.0.1 (DNS rebinding),
/// but its requests then carry that domain as Host.
pub(super) fn check_host(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    host_ok(&state.options, headers)
}

/// [`check_host`] against the server's options.
pub(super) fn host_ok(options: &super::Options, headers: &HeaderMap) -> Result<(), ApiError> {
    if options.api_key.is_some() {
        return Ok(());
    }
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        // HTTP/1.0 and HTTP/2 requests may carry none (the authority is the connection's).
        return Ok(());
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let ok = name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || options
            .allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("host `{name}` is not allowed; use an IP address, localhost, --allowed-host or an API key"),
        ))
    }
}

/// A POST route's request: the server, and the body as `T` once the API key is checked and
/// the JSON parsed (every POST route's first step). An error is the route's to answer, in its
/// own API's format; only a body that cannot be read at all is refused here.
pub(super) struct Authed<T> {
    pub s: Shared,
    pub body: Result<T, ApiError>,
}

impl<T: DeserializeOwned> FromRequest<Shared> for Authed<T> {
    type Rejection = BytesRejection;

    async fn from_request(req: Request, s: &Shared) -> Result<Self, Self::Rejection> {
        let headers = req.headers().clone();
        let bytes = Bytes::from_request(req, s).await?;
        let body = check_auth(s, &headers).and_then(|()| parse_body(&headers, &bytes));
        Ok(Authed { s: s.clone(), body })
    }
}

/// Parses a JSON body ourselves so malformed JSON and wrong types get OpenAI-format 400s.
pub(super) fn parse_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, ApiError> {
    // Required: a page on another site can send a "simple" cross-origin POST (text/plain,
    // no preflight) to a local server, but not one declaring application/json.
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.to_ascii_lowercase().starts_with("application/json") {
        let got = if ct.is_empty() { "none" } else { ct };
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("expected Content-Type application/json, got {got}"),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "malformed JSON"
        } else {
            "invalid request"
        };
        ApiError::bad(format!("{what}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_compare_whole() {
        use super::same_secret;
        assert!(same_secret("k3y", "k3y"));
        assert!(!same_secret("k3", "k3y"));
        assert!(!same_secret("k3yy", "k3y"));
        assert!(!same_secret("x3y", "k3y"));
        assert!(!same_secret("", "k3y"));
    }
}
