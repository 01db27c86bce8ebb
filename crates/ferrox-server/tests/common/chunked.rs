//! HTTP/1.1 chunked transfer coding, for the raw clients of the ferrox-server tests
//! (`common`) and the ferrox-cli tests (`common::server`, by `#[path]`).

/// The payload of a chunked body: the chunks' data joined, up to the last (empty) chunk.
pub fn dechunk(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}
