//! Truncated and corrupted GGUF files: each gives a typed error, none panics, and the parse of
//! none allocates more than the file holds (a counting allocator proves it per thread).

mod gguf_writer;

use ferrox_core::storage::Bytes;
use ferrox_format::gguf::{GgufError, GgufFile, Problem, TensorProblem};
use gguf_writer::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn on_alloc(size: usize) {
    let _ = LARGEST.try_with(|m| m.set(m.get().max(size)));
    let _ = LIVE.try_with(|l| {
        let n = l.get() + size;
        l.set(n);
        let _ = PEAK.try_with(|p| p.set(p.get().max(n)));
    });
}

fn on_free(size: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(size)));
}

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_free(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_free(layout.size());
        on_alloc(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap use on this thread while parsing: the peak growth and the largest single allocation.
struct Heap {
    peak: usize,
    largest: usize,
}

fn parse_counted(bytes: &[u8]) -> (Result<GgufFile, GgufError>, Heap) {
    let b = Bytes::from_vec(bytes.to_vec());
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    LARGEST.with(|m| m.set(0));
    let r = GgufFile::from_bytes(b);
    let heap = Heap {
        peak: PEAK.with(|p| p.get()) - base,
        largest: LARGEST.with(|m| m.get()),
    };
    (r, heap)
}

/// Heap use is linear in the bytes actually present, never in a claimed count: parsed entries
/// cost ~100 bytes against >= 13 in the file, so a metadata-only prefix may take a few times
/// its size, but a count of 2^50 reserves nothing it cannot back.
fn check_heap(len: usize, h: &Heap, what: &dyn std::fmt::Display) {
    assert!(
        h.peak <= 8 * len + 1024,
        "{what}: {} bytes allocated (largest {}) for a {len}-byte file",
        h.peak,
        h.largest
    );
}

/// Expects a refusal whose parse stayed within the file's size.
fn refuse(bytes: &[u8]) -> GgufError {
    let (r, heap) = parse_counted(bytes);
    let e = r.expect_err("malformed file was accepted");
    check_heap(bytes.len(), &heap, &e);
    assert!(!e.to_string().is_empty());
    e
}

/// For corrupt fields of a full-size (data-dominated, like every real) file the whole parse
/// stays within the file size.
fn refuse_full(bytes: &[u8]) -> GgufError {
    let (r, heap) = parse_counted(bytes);
    let e = r.expect_err("malformed file was accepted");
    assert!(
        heap.peak <= bytes.len(),
        "{e}: {} bytes allocated for a {}-byte file",
        heap.peak,
        bytes.len()
    );
    e
}

/// The problem of a `BadTensor` refusal; any other error fails the test.
fn tensor_problem(e: &GgufError) -> &TensorProblem {
    match e {
        GgufError::BadTensor { problem, .. } => problem,
        other => panic!("expected BadTensor, got {other:?}"),
    }
}

fn too_large(e: &GgufError, want: &str) {
    match e {
        GgufError::Malformed {
            problem: Problem::TooLarge { what, .. },
            ..
        } if *what == want => {}
        other => panic!("expected TooLarge({want}), got {other:?}"),
    }
}

#[test]
fn sample_parses_within_its_size() {
    let built = sample().build();
    let (r, heap) = parse_counted(&built.bytes);
    let f = r.unwrap();
    assert_eq!(f.tensors().len(), 4);
    assert!(
        heap.peak <= built.bytes.len(),
        "{} > {}",
        heap.peak,
        built.bytes.len()
    );
}

#[test]
fn truncated_at_every_section_boundary() {
    let built = sample().build();
    let len = built.bytes.len();
    let infos_end = built
        .boundaries
        .iter()
        .rfind(|(l, _)| l.ends_with(":offset"))
        .unwrap()
        .1;
    for (label, at) in &built.boundaries {
        if *at == len {
            continue;
        }
        let e = refuse(&built.bytes[..*at]);
        // Inside the data section the tensor names itself; before it the section does.
        match (&e, *at >= infos_end) {
            (GgufError::BadTensor { problem, .. }, true) => {
                assert!(
                    matches!(problem, TensorProblem::OutOfFile { .. }),
                    "{label}: {e}"
                )
            }
            (GgufError::Malformed { problem, .. }, false) => assert!(
                matches!(
                    problem,
                    Problem::Truncated { .. } | Problem::TooLarge { .. }
                ),
                "{label}: {e}"
            ),
            _ => panic!("truncated after {label} (offset {at}): unexpected {e:?}"),
        }
    }
}

#[test]
fn truncated_at_every_offset() {
    let built = sample().build();
    for at in 0..built.bytes.len() {
        refuse(&built.bytes[..at]);
    }
}

#[test]
fn truncated_at_random_offsets_of_a_bigger_file() {
    // A vocabulary big enough that truncation lands inside long arrays.
    let toks: Vec<Val> = (0..3000).map(|i| v_str(&format!("tok{i}"))).collect();
    let built = sample()
        .kv("tokenizer.ggml.merges", v_arr(T_STRING, &toks))
        .f32_tensor("big", &[64, 64])
        .build();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..500 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x % built.bytes.len() as u64) as usize;
        refuse(&built.bytes[..at]);
    }
}

#[test]
fn wrong_magic() {
    let mut b = sample().build().bytes;
    b[..4].copy_from_slice(b"GGML");
    assert!(matches!(refuse(&b), GgufError::BadMagic { found } if found == "GGML"));
    assert!(matches!(refuse(b"\0\0"), GgufError::Malformed { .. }));
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 0x0300_0000] {
        let mut w = sample();
        w.version = v;
        let e = refuse(&w.build().bytes);
        assert!(
            matches!(e, GgufError::UnsupportedVersion(x) if x == v),
            "{e}"
        );
    }
}

#[test]
fn version_2_is_read() {
    let mut w = sample();
    w.version = 2;
    let f = GgufFile::from_bytes(Bytes::from_vec(w.build().bytes)).unwrap();
    assert_eq!(f.version(), 2);
}

#[test]
fn huge_counts() {
    let built = sample().build();
    for (field, count, what) in [
        ("n_tensors", 1u64 << 40, "tensor count"),
        ("n_kv", 1u64 << 40, "metadata entry count"),
        ("n_kv", u64::MAX, "metadata entry count"),
    ] {
        too_large(
            &refuse_full(&built.patched(field, 0, &count.to_le_bytes())),
            what,
        );
    }
}

#[test]
fn string_length_2_pow_60() {
    let built = sample().build();
    let big = (1u64 << 60).to_le_bytes();
    // A key, a string value, a string inside an array, a tensor name.
    for (field, delta) in [
        ("kv:general.name:key_len", 0),
        ("kv:general.name:value", 0),
        ("kv:tokenizer.ggml.tokens:value", 12),
        ("t:blk.0.q8:name_len", 0),
    ] {
        let e = refuse_full(&built.patched(field, delta, &big));
        too_large(&e, "string length");
    }
}

#[test]
fn array_of_2_pow_50_elements() {
    let built = sample().build();
    let big = 1u64 << 50;
    for (field, delta, count) in [
        ("kv:tokenizer.ggml.tokens:value", 4, big),
        ("kv:tokenizer.ggml.scores:value", 4, big),
        ("kv:t.bools:value", 4, big),
        ("kv:t.nested:value", 4, big),
        // The nested arrays' own counts, and a count whose byte size overflows u64.
        ("kv:t.nested:value", 16, big),
        ("kv:tokenizer.ggml.scores:value", 4, u64::MAX),
    ] {
        too_large(
            &refuse_full(&built.patched(field, delta, &count.to_le_bytes())),
            "array length",
        );
    }
}

#[test]
fn unknown_value_types() {
    let built = sample().build();
    for (field, delta) in [
        ("kv:t.u8:type", 0),
        ("kv:t.nested:value", 0),
        ("kv:t.nested:value", 12),
    ] {
        let e = refuse_full(&built.patched(field, delta, &13u32.to_le_bytes()));
        assert!(
            matches!(
                e,
                GgufError::Malformed {
                    problem: Problem::UnknownValueType(13),
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn nesting_too_deep() {
    let mut v = v_arr(T_U8, &[v_u8(1)]);
    for _ in 0..40 {
        v = v_arr(T_ARRAY, &[v]);
    }
    let e = refuse(&Writer::new().kv("deep", v).build().bytes);
    assert!(
        matches!(
            e,
            GgufError::Malformed {
                problem: Problem::TooDeep(_),
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn tensor_offset_past_eof() {
    let built = sample().build();
    for off in [
        1u64 << 20,
        u64::MAX - 31,
        (built.bytes.len() as u64).next_multiple_of(32),
    ] {
        let e = refuse_full(&built.patched("t:blk.0.q8:offset", 0, &off.to_le_bytes()));
        assert!(
            matches!(&e, GgufError::BadTensor { name, problem: TensorProblem::OutOfFile { .. } } if name == "blk.0.q8"),
            "{e}"
        );
    }
}

#[test]
fn dims_product_overflow() {
    let built = sample().build();
    let mut dims = Vec::new();
    for d in [1u64 << 32, 1 << 32, 1] {
        dims.extend_from_slice(&d.to_le_bytes());
    }
    let e = refuse_full(&built.patched("t:blk.0.ffn_up.weight:dims", 0, &dims));
    assert!(
        matches!(&e, GgufError::BadTensor { name, problem: TensorProblem::DimsOverflow(_) } if name == "blk.0.ffn_up.weight"),
        "{e}"
    );
    let e = refuse_full(&built.patched("t:blk.0.ffn_up.weight:dims", 8, &u64::MAX.to_le_bytes()));
    assert!(
        matches!(
            tensor_problem(&e),
            TensorProblem::DimTooLarge { index: 1, .. }
        ),
        "{e}"
    );
    // Five dimensions.
    let e = refuse_full(&built.patched("t:blk.0.ffn_up.weight:n_dims", 0, &5u32.to_le_bytes()));
    assert!(
        matches!(
            e,
            GgufError::Malformed {
                problem: Problem::TooManyDims(5),
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn unknown_tensor_type() {
    let built = sample().build();
    for id in [4u32, 31, 99, u32::MAX] {
        let e = refuse_full(&built.patched("t:token_embd.weight:type", 0, &id.to_le_bytes()));
        assert!(
            matches!(&e, GgufError::BadTensor { name, problem: TensorProblem::UnknownType(x) } if name == "token_embd.weight" && *x == id),
            "{e}"
        );
    }
}

#[test]
fn rows_not_whole_blocks() {
    // A Q8_0 tensor of 16 columns (blocks are 32).
    let b = Writer::new()
        .tensor("q", &[16, 1], 8, vec![0; 34])
        .build()
        .bytes;
    let e = refuse(&b);
    assert!(
        matches!(tensor_problem(&e), TensorProblem::NotBlockMultiple { .. }),
        "{e}"
    );
}

#[test]
fn misaligned_data() {
    let built = sample().build();
    let e = refuse_full(&built.patched("t:blk.0.q8:offset", 0, &(1u64 + 32 * 20).to_le_bytes()));
    assert!(
        matches!(
            tensor_problem(&e),
            TensorProblem::Misaligned { align: 32, .. }
        ),
        "{e}"
    );
    // An alignment that is not a power of two, or not a u32.
    for v in [v_u32(0), v_u32(48), v_u64(32)] {
        let e = refuse(&sample().kv("general.alignment", v).build().bytes);
        assert!(
            matches!(
                e,
                GgufError::BadMetadata { .. } | GgufError::DuplicateKey(_)
            ),
            "{e}"
        );
    }
    let mut w = sample();
    w.kvs.retain(|(k, _)| k != "general.alignment");
    let w = w.kv("general.alignment", v_u32(48));
    assert!(
        matches!(refuse(&w.build().bytes), GgufError::BadMetadata { key, .. } if key == "general.alignment")
    );
}

#[test]
fn duplicates() {
    let e = refuse(&sample().kv("general.name", v_str("again")).build().bytes);
    assert!(matches!(e, GgufError::DuplicateKey(k) if k == "general.name"));
    let e = refuse(&sample().f32_tensor("token_embd.weight", &[4]).build().bytes);
    assert!(matches!(e, GgufError::DuplicateTensor(n) if n == "token_embd.weight"));
}

#[test]
fn every_single_byte_corruption_is_handled() {
    // Not a panic, whatever the outcome; a refusal stays within the file size.
    let built = sample().build();
    let end = built.field("data");
    for at in 0..end {
        for x in [0xffu8, 0x80, 0x01] {
            let mut b = built.bytes.clone();
            b[at] ^= x;
            let (r, heap) = parse_counted(&b);
            if r.is_err() {
                check_heap(b.len(), &heap, &format!("flip at {at}"));
            }
        }
    }
}
