//! The hf-tiny MoE / MLA / DSA checkpoints (and dense GLM-4, and hybrid Qwen3-Next) loaded from GGUF files written with
//! llama.cpp's tensor names, transforms and metadata keys (scripts/hf_tiny_to_gguf.py: stacked
//! `ffn_*_exps`, split `attn_k_b`/`attn_v_b`, permuted Llama q/k, MQA-style MLA keys, Qwen3-Next's
//! regrouped `attn_qkv`/`attn_gate` and `ssm_*` tensors and keys) checked
//! against the same transformers fp32 outputs as the safetensors test: logits at every position
//! within 1e-4, greedy continuation exact, token path bit-identical to the batch. Also checks
//! that the GGUF and safetensors loads agree on the config and that a broken file is refused
//! with the offending tensor named.

mod common;
use common::tiny::{
    check_gguf_config as check_config, check_gguf_greedy, check_gguf_logits,
    check_gguf_speculative, check_tiny_greedy, check_tiny_logits, tiny_gguf as gguf,
    tiny_reference as reference,
};
use ferrox_format::gguf::GgufFile;
use ferrox_models::decoder::Decoder;

/// gpt-oss as released: expert stacks in MXFP4 (the rest F32). Against the same file with every
/// weight dequantized to F32 (exact arithmetic): logits within 2% of the largest logit (the
/// MXFP4 kernels round activations to Q8_0), the same argmax wherever the exact margin exceeds
/// twice that, and the token path bit-identical to the batch. The dequantization itself is
/// bit-exact with gguf-py (`dequant_digests.rs`).
#[test]
fn gpt_oss_mxfp4_experts() {
    let path = gguf("gpt_oss_mxfp4");
    let q = Decoder::load(&path).unwrap();
    let exact = Decoder::load_dequantized(&path).unwrap();
    let input = common::ids(&common::read_json(
        &reference("gpt_oss").join("input_ids.json"),
    ));
    let got = q.forward_batch(&input, 0, &mut q.new_caches());
    let want = exact.forward_batch(&input, 0, &mut exact.new_caches());
    let top = want.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    let tol = 0.02 * top;
    for (p, (a, b)) in got.iter().zip(&want).enumerate() {
        let diff = common::max_abs_diff(a, b);
        assert!(diff < tol, "position {p}: {diff} (largest logit {top})");
        let mut sorted = b.clone();
        sorted.sort_by(|x, y| y.total_cmp(x));
        if sorted[0] - sorted[1] > 2.0 * tol {
            assert_eq!(common::argmax(a), common::argmax(b), "argmax at {p}");
        }
    }
    let mut caches = q.new_caches();
    for (p, &t) in input.iter().enumerate() {
        assert_eq!(
            q.forward_token(t, p, &mut caches),
            got[p],
            "token path at {p}"
        );
    }
}

common::tiny::moe_arch_tests!([logits: check_gguf_logits, greedy: check_gguf_greedy, config: check_config]);

common::tiny::arch_tests!([speculative: check_gguf_speculative] {
    granitemoe => "granitemoe",
    gpt_oss => "gpt_oss",
    qwen3_next => "qwen3_next",
});

#[test]
fn files_use_llama_cpp_arch_names_and_split_mla() {
    let arch_of = |a: &str| {
        GgufFile::open(&gguf(a))
            .unwrap()
            .architecture()
            .unwrap()
            .to_string()
    };
    assert_eq!(arch_of("deepseek_v3"), "deepseek2");
    assert_eq!(arch_of("glm4_moe_lite"), "deepseek2");
    assert_eq!(arch_of("deepseek_v32"), "deepseek32");
    assert_eq!(arch_of("glm_moe_dsa"), "glm-dsa");
    assert_eq!(arch_of("glm4_moe"), "glm4moe");
    assert_eq!(arch_of("qwen3_moe"), "qwen3moe");
    assert_eq!(arch_of("mixtral"), "llama");
    assert_eq!(arch_of("granitemoe"), "granitemoe");
    assert_eq!(arch_of("qwen3_next"), "qwen3next");
    let f = GgufFile::open(&gguf("deepseek_v3")).unwrap();
    assert!(f.tensor("blk.1.attn_k_b.weight").is_some());
    assert!(f.tensor("blk.1.attn_kv_b.weight").is_none());
    assert_eq!(
        f.tensor("blk.1.ffn_gate_exps.weight").unwrap().dims,
        vec![64, 32, 16]
    );
}

/// A copy of a fixture with `edit` applied to its bytes, loaded.
fn load_edited(arch: &str, tag: &str, edit: impl Fn(&mut Vec<u8>)) -> String {
    let mut bytes = std::fs::read(gguf(arch)).unwrap();
    edit(&mut bytes);
    let path = std::env::temp_dir().join(format!(
        "ferrox-moe-gguf-{}-{arch}-{tag}.gguf",
        std::process::id()
    ));
    std::fs::write(&path, &bytes).unwrap();
    let res = Decoder::load(&path);
    std::fs::remove_file(&path).ok();
    match res {
        Ok(_) => panic!("{arch}/{tag}: a broken file loaded"),
        Err(e) => e.to_string(),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not in file", String::from_utf8_lossy(needle)))
}

#[test]
fn missing_or_misshapen_tensors_are_named() {
    // Rename one half of the split MLA up-projection: the other half is then missing.
    let msg = load_edited("deepseek_v3", "missing", |b| {
        let at = find(b, b"blk.2.attn_k_b.weight");
        b[at..at + 21].copy_from_slice(b"blk.2.attn_k_X.weight");
    });
    assert!(msg.contains("blk.2.attn_k_b.weight"), "{msg}");

    // Swap the two inner dims of a stacked expert tensor (same size, wrong shape).
    let msg = load_edited("qwen3_moe", "shape", |b| {
        let name = b"blk.1.ffn_gate_exps.weight";
        let dims = find(b, name) + name.len() + 4; // n_dims: u32, then u64 dims
        let (d0, d1) = (dims, dims + 8);
        let a: [u8; 8] = b[d0..d0 + 8].try_into().unwrap();
        let c: [u8; 8] = b[d1..d1 + 8].try_into().unwrap();
        b[d0..d0 + 8].copy_from_slice(&c);
        b[d1..d1 + 8].copy_from_slice(&a);
    });
    assert!(msg.contains("blk.1.ffn_gate_exps.weight"), "{msg}");
}

/// `convert_hf_to_gguf.py --fuse-gate-up-exps`: one `ffn_gate_up_exps` per layer instead of
/// separate gate and up stacks.
#[test]
fn fused_gate_up_experts() {
    let path = gguf("qwen3_moe_fused");
    let f = GgufFile::open(&path).unwrap();
    assert!(f.tensor("blk.1.ffn_gate_up_exps.weight").is_some());
    assert!(f.tensor("blk.1.ffn_gate_exps.weight").is_none());
    check_tiny_logits(&path, &reference("qwen3_moe"));
    check_tiny_greedy(&path, &reference("qwen3_moe"));
}

/// `block_count` includes appended NextN/MTP blocks (`nextn_predict_layers`), which the decoder
/// leaves out: declaring the last of glm4_moe's 3 blocks an MTP block gives a 2-layer model.
#[test]
fn mtp_blocks_are_not_decoder_layers() {
    let mut bytes = std::fs::read(gguf("glm4_moe")).unwrap();
    let key = b"glm4moe.nextn_predict_layers";
    let at = find(&bytes, key) + key.len();
    assert_eq!(&bytes[at..at + 4], &4u32.to_le_bytes(), "value type u32");
    assert_eq!(&bytes[at + 4..at + 8], &0u32.to_le_bytes());
    bytes[at + 4..at + 8].copy_from_slice(&1u32.to_le_bytes());
    let path =
        std::env::temp_dir().join(format!("ferrox-moe-gguf-{}-mtp.gguf", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let dec = Decoder::load(&path);
    std::fs::remove_file(&path).ok();
    let dec = dec.unwrap();
    assert_eq!(dec.config.n_layers, 2);
    assert_eq!(dec.config.layer_moe, vec![false, true]);
}

/// Qwen3-Next without one of its DeltaNet keys or tensors is refused with the key or tensor
/// named, not a panic.
#[test]
fn qwen3_next_missing_key_or_tensor_is_named() {
    let msg = load_edited("qwen3_next", "key", |b| {
        let at = find(b, b"qwen3next.ssm.state_size");
        b[at + 23] = b'X';
    });
    assert!(msg.contains("qwen3next.ssm.state_size"), "{msg}");
    let msg = load_edited("qwen3_next", "conv", |b| {
        let at = find(b, b"blk.1.ssm_conv1d.weight");
        b[at + 6] = b'X';
    });
    assert!(msg.contains("blk.1.ssm_conv1d.weight"), "{msg}");
    // Without `attn_qkv` the layer falls back to the legacy fused `ssm_in`, named when absent.
    let msg = load_edited("qwen3_next", "qkv", |b| {
        let at = find(b, b"blk.2.attn_qkv.weight");
        b[at + 6] = b'X';
    });
    assert!(msg.contains("blk.2.ssm_in.weight"), "{msg}");
}
