//! The chat page: served at `/` with its assets and security headers when enabled (also
//! without the API key, which still guards the API), a 404 like any unknown path when not.

mod common;
use common::*;
use ferrox_server::Options;

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The same-origin paths the page's `src` and `href` attributes name.
fn asset_paths(html: &str) -> Vec<String> {
    html.split(['"', '\''])
        .filter(|s| s.starts_with("/ui/"))
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn page_is_served_with_its_assets_when_enabled() {
    let options = Options {
        api_key: Some("sekret".into()),
        webui: true,
        ..Options::default()
    };
    let a = server_with(1, 4, options).await;
    let r = get(&a, "/").await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(header(&r, "x-content-type-options"), Some("nosniff"));
    assert_eq!(header(&r, "referrer-policy"), Some("no-referrer"));
    let csp = header(&r, "content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(r.body.contains("<title>ferrox chat</title>"));

    let assets = asset_paths(&r.body);
    assert_eq!(assets.len(), 3, "{assets:?}");
    for path in assets {
        let r = get(&a, &path).await;
        assert_eq!(r.status, 200, "{path}");
        let ct = header(&r, "content-type").unwrap_or_default();
        let want = if path.ends_with(".css") {
            "text/css"
        } else {
            "text/javascript"
        };
        assert!(ct.starts_with(want), "{path}: {ct}");
        assert_eq!(header(&r, "x-content-type-options"), Some("nosniff"));
        assert!(!r.body.is_empty());
    }
    // The page is public; what it asks the API for is not.
    assert_eq!(get(&a, "/v1/models").await.status, 401);
    assert_eq!(get_with_key(&a, "/v1/models", "sekret").await.status, 200);
}

#[tokio::test]
async fn page_is_not_found_when_disabled() {
    let a = server(1, 4, None).await;
    for path in ["/", "/ui/app.js", "/ui/app.css", "/ui/markdown.js"] {
        let r = get(&a, path).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["error"]["type"], "not_found_error", "{path}");
    }
    assert_eq!(get(&a, "/health").await.status, 200);
}
