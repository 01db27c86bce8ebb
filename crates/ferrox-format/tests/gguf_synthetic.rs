//! A synthetic file written here reads back exactly: every value type, nested arrays, tensors,
//! v2, lossy UTF-8, and split sets.

mod gguf_writer;

use ferrox_core::storage::Bytes;
use ferrox_format::gguf::{GgufError, GgufFile, MetaArray, MetaType, MetaValue};
use gguf_writer::*;
use std::path::PathBuf;

fn open(w: &Writer) -> GgufFile {
    GgufFile::from_bytes(Bytes::from_vec(w.build().bytes)).unwrap()
}

#[test]
fn values_read_back() {
    let f = open(&sample());
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.metadata()[1].0, "general.name");
    assert_eq!(f.get("t.u8"), Some(&MetaValue::U8(200)));
    assert_eq!(f.get("t.i8"), Some(&MetaValue::I8(-5)));
    assert_eq!(f.get("t.u16"), Some(&MetaValue::U16(60000)));
    assert_eq!(f.get("t.i16"), Some(&MetaValue::I16(-30000)));
    assert_eq!(f.get_u64("t.u32"), Some(4_000_000_000));
    assert_eq!(f.get("t.i32"), Some(&MetaValue::I32(-7)));
    assert_eq!(f.get_u64("t.i32"), None);
    assert_eq!(f.get_i64("t.i32"), Some(-7));
    assert_eq!(f.get_u64("t.u64"), Some(1 << 40));
    assert_eq!(f.get_i64("t.i64"), Some(-(1 << 40)));
    assert_eq!(f.get_f32("t.f32"), Some(0.5));
    assert_eq!(f.get_f32("t.f64"), Some(-0.25));
    assert_eq!(f.get_bool("t.bool"), Some(true));
    assert_eq!(f.get_str("general.name"), Some("tiny"));
    assert_eq!(f.get_str("t.u8"), None);
    assert_eq!(f.get("missing"), None);
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap(),
        ["<pad>", "<s>", "</s>", "hello", " world", "é", "日本", ""]
    );
    assert_eq!(
        f.get_f32_array("tokenizer.ggml.scores").unwrap(),
        (0..8).map(|i| -(i as f32)).collect::<Vec<_>>()
    );
    assert_eq!(
        f.get_i64_array("tokenizer.ggml.token_type").unwrap(),
        [0, 1, 2, 0, 1, 2, 0, 1]
    );
    assert_eq!(
        f.get_array("t.bools"),
        Some(&MetaArray::Bool(vec![true, false]))
    );
    assert_eq!(
        f.get_array("t.nested"),
        Some(&MetaArray::Array(vec![
            MetaArray::U16(vec![1, 2]),
            MetaArray::U16(vec![]),
            MetaArray::U16(vec![3]),
        ]))
    );
    let empty = f.get_array("t.empty").unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.elem_type(), MetaType::U64);
    let toks = f.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(toks.get(6), Some(MetaValue::String("日本".into())));
    assert_eq!(toks.iter().count(), 8);
}

#[test]
fn tensors_read_back() {
    let f = open(&sample());
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "token_embd.weight",
            "blk.0.attn_norm.weight",
            "blk.0.ffn_up.weight",
            "blk.0.q8"
        ]
    );
    let t = f.tensor("token_embd.weight").unwrap();
    assert_eq!((t.n_elements, t.n_bytes), (1024, 4096));
    assert_eq!(t.file_offset % 32, 0);
    let d = f.tensor_data(t);
    assert_eq!(&d[4..8], &1f32.to_le_bytes());
    let w = f.weight_matrix("token_embd.weight").unwrap();
    assert_eq!((w.rows(), w.cols()), (64, 16));
    let mut row = vec![0f32; 16];
    w.dequantize_row(2, &mut row).unwrap();
    assert_eq!(row[0], 32.0);
    let w = f.weight_matrix("blk.0.ffn_up.weight").unwrap();
    assert_eq!((w.rows(), w.cols()), (4, 16));
    let q = f.tensor("blk.0.q8").unwrap();
    assert_eq!(q.n_bytes, 68);
    assert_eq!(f.weight_matrix("blk.0.q8").unwrap().rows(), 2);
    assert!(matches!(
        f.weight_matrix("nope"),
        Err(GgufError::MissingTensor(n)) if n == "nope"
    ));
    let three_d = open(&Writer::new().f32_tensor("x", &[2, 2, 2]));
    assert!(matches!(
        three_d.weight_matrix("x"),
        Err(GgufError::BadTensor { .. })
    ));
}

#[test]
fn custom_alignment_and_no_tensors() {
    let mut w = Writer::new()
        .kv("general.alignment", v_u32(64))
        .f32_tensor("a", &[3])
        .f32_tensor("b", &[5]);
    w.alignment = 64;
    let f = open(&w);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.tensor("b").unwrap().offset, 64);
    assert_eq!(f.data_start(0).unwrap() % 64, 0);
    let empty = open(&Writer::new().kv("general.architecture", v_str("x")));
    assert!(empty.tensors().is_empty());
}

#[test]
fn invalid_utf8_is_replaced() {
    let mut w = Writer::new().kv("k", Val(T_STRING, str_bytes(b"a\xffb")));
    w = w.kv(
        "arr",
        v_arr(
            T_STRING,
            &[
                Val(T_STRING, str_bytes(b"ok")),
                Val(T_STRING, str_bytes(b"\xc3")),
            ],
        ),
    );
    let f = open(&w);
    assert_eq!(f.get_str("k"), Some("a\u{fffd}b"));
    assert_eq!(f.get_str_array("arr").unwrap(), ["ok", "\u{fffd}"]);
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrox-gguf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn shard(no: u16, count: u16, tensors: &[&str]) -> Writer {
    let mut w = Writer::new();
    if no == 0 {
        w = w.kv("general.architecture", v_str("llama"));
    }
    w = w
        .kv("split.no", v_u16(no))
        .kv("split.count", v_u16(count))
        .kv("split.tensors.count", v_i32(4));
    for t in tensors {
        w = w.f32_tensor(t, &[8, 2]);
    }
    w
}

#[test]
fn split_set_opens_as_one() {
    let d = tmpdir("split");
    let shards = [
        shard(0, 3, &["a", "b"]),
        shard(1, 3, &["c"]),
        shard(2, 3, &["d"]),
    ];
    for (i, w) in shards.iter().enumerate() {
        let p = d.join(format!("m-{:05}-of-00003.gguf", i + 1));
        std::fs::write(p, w.build().bytes).unwrap();
    }
    // Any shard opens the whole set.
    for i in 1..=3 {
        let f = GgufFile::open(&d.join(format!("m-{i:05}-of-00003.gguf"))).unwrap();
        assert_eq!(f.shard_count(), 3);
        assert_eq!(f.architecture(), Some("llama"));
        let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        let c = f.tensor("d").unwrap();
        assert_eq!(c.shard, 2);
        assert_eq!(&f.tensor_data(c)[4..8], &1f32.to_le_bytes());
        assert_eq!(f.weight_matrix("c").unwrap().rows(), 2);
    }
    // A missing shard names its path.
    std::fs::remove_file(d.join("m-00003-of-00003.gguf")).unwrap();
    let e = GgufFile::open(&d.join("m-00001-of-00003.gguf")).unwrap_err();
    assert!(
        matches!(&e, GgufError::Io { path, .. } if path.ends_with("m-00003-of-00003.gguf")),
        "{e}"
    );
    // A shard that claims the wrong position.
    std::fs::write(
        d.join("m-00003-of-00003.gguf"),
        shard(1, 3, &["d"]).build().bytes,
    )
    .unwrap();
    let e = GgufFile::open(&d.join("m-00001-of-00003.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Split { .. }), "{e}");
    // Duplicate tensors across shards.
    std::fs::write(
        d.join("m-00003-of-00003.gguf"),
        shard(2, 3, &["a"]).build().bytes,
    )
    .unwrap();
    let e = GgufFile::open(&d.join("m-00001-of-00003.gguf")).unwrap_err();
    assert!(
        matches!(&e, GgufError::DuplicateTensor(n) if n == "a"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn missing_file_is_io_error() {
    let e = GgufFile::open(std::path::Path::new("/nonexistent/x.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/x.gguf"));
}
