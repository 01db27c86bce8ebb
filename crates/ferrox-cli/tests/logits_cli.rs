//! `ferrox logits` end to end on a tiny checkpoint: the written .npy equals transformers'.

use std::path::Path;

mod common;

#[test]
fn logits_all_matches_transformers_on_tiny_llama() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ferrox-models/tests/fixtures/hf-tiny/llama");
    let ids = "328,384,353,219,207,297,389,171,312,166,505,106,86,86,133,180,256,432,78,401,490,209,394,411";
    let out = std::env::temp_dir().join(format!("ferrox-logits-{}.npy", std::process::id()));
    let (dir_arg, out_arg) = (dir.to_str().unwrap(), out.to_str().unwrap());
    // An f32 cache: transformers' reference is computed in f32 (the default, f16, as
    // llama.cpp's, differs from it by about 1e-3).
    let f32_cache = ["--ctk", "f32", "--ctv", "f32"];
    let args = [
        "logits", "-m", dir_arg, "--ids", ids, "--all", "-o", out_arg,
    ];
    common::ferrox_ok(args.iter().chain(&f32_cache));
    let (header, all) = common::read_npy(&out);
    let (_, want) = common::read_npy(&dir.join("logits.npy"));
    std::fs::remove_file(&out).ok();
    assert!(header.contains("'shape': (24, 512)"), "{header}");
    let worst = all
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "max abs diff {worst}");

    // Last position only by default.
    let args = ["logits", "-m", dir_arg, "--ids", ids, "-o", out_arg];
    common::ferrox_ok(args.iter().chain(&f32_cache));
    let (header, got) = common::read_npy(&out);
    std::fs::remove_file(&out).ok();
    assert!(header.contains("'shape': (1, 512)"), "{header}");
    // The lm_head row is computed the same way whether or not other rows are.
    assert_eq!(got, all[23 * 512..]);
}

/// A cache type the model's heads cannot take is refused before any work, naming the flags,
/// the type and the width (tiny llama's heads are 16 wide, q8_0 blocks 32); a supported one
/// gives the same bits whichever spelling asks for it.
#[test]
fn unsupported_cache_type_is_refused_by_name() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ferrox-models/tests/fixtures/hf-tiny/llama");
    let out = std::env::temp_dir().join(format!("ferrox-ctk-{}.npy", std::process::id()));
    let (dir_arg, out_arg) = (dir.to_str().unwrap(), out.to_str().unwrap());
    let args = ["logits", "-m", dir_arg, "--ids", "1,2,3", "-o", out_arg];
    let run = common::ferrox(args.iter().chain(&["--ctk", "q8_0", "--ctv", "f16"]));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        err.contains("unsupported KV cache format (--cache-type-k q8_0 --cache-type-v f16)"),
        "{err}"
    );
    assert!(
        err.contains(
            "KV cache type q8_0 needs head widths that are multiples of 32 (this model's: 16)"
        ),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
    // A supported format runs, and its two spellings give the same bits.
    let bits: Vec<Vec<f32>> = [
        ["--ctk", "bf16", "--ctv", "f16", "--attn-bf16"],
        [
            "--attn-bf16",
            "--cache-type-v",
            "f16",
            "--cache-type-k",
            "bf16",
        ],
    ]
    .iter()
    .map(|flags| {
        common::ferrox_ok(args.iter().chain(flags));
        let (_, got) = common::read_npy(&out);
        std::fs::remove_file(&out).ok();
        got
    })
    .collect();
    assert_eq!(bits[0], bits[1]);
}

/// Without the `mpi` feature, `--expert-parallel` is refused with the reason, before loading.
#[cfg(not(feature = "mpi"))]
#[test]
fn expert_parallel_needs_the_mpi_build() {
    let out = common::ferrox([
        "logits",
        "-m",
        "no-such-model.gguf",
        "--ids",
        "1",
        "-o",
        "unused.npy",
        "--expert-parallel",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--features mpi"), "{err}");
}
