//! The chat page at `/`: one hand-written HTML file with its stylesheet and scripts, embedded
//! in the binary and served as they are. The page holds no data (conversations live in the
//! browser's localStorage), so it is public even with an API key; the API calls it makes
//! carry the key. Routed only when `Options::webui` is set.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::Shared;

const INDEX: &str = include_str!("page/index.html");
const CSS: &str = include_str!("page/app.css");
const MARKDOWN_JS: &str = include_str!("page/markdown.js");
const APP_JS: &str = include_str!("page/app.js");

/// Scripts and styles only from the server itself (no inline code, so model output that ever
/// slipped through the escaping still could not run), requests only back to it, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The page's files: path, content type, body.
const ASSETS: [(&str, &str, &str); 4] = [
    ("/", "text/html; charset=utf-8", INDEX),
    ("/ui/app.css", "text/css; charset=utf-8", CSS),
    (
        "/ui/markdown.js",
        "text/javascript; charset=utf-8",
        MARKDOWN_JS,
    ),
    ("/ui/app.js", "text/javascript; charset=utf-8", APP_JS),
];

/// The page's routes: `/` and its assets under `/ui/`.
pub(super) fn routes(router: Router<Shared>) -> Router<Shared> {
    ASSETS
        .into_iter()
        .fold(router, |r, (path, content_type, body)| {
            r.route(path, get(move || async move { asset(content_type, body) }))
        })
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        // The assets change with the binary; revalidating is cheap on loopback.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body)
}
