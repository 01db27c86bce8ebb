//! Peak resident memory of `ferrox run` (a 128-token greedy generation) stays within the model
//! file plus its KV cache plus 64 MiB, on the three real models. Repacked weights replace the
//! file's pages rather than add to them; the tokenizer, scratch and logits share the 64 MiB.

mod common;

/// `(catalog name, layers, kv heads, head dim)`.
const MODELS: [(&str, u64, u64, u64); 3] = [
    ("gemma3:270m", 18, 1, 256),
    ("qwen2.5-coder:0.5b-instruct", 24, 2, 64),
    ("qwen2.5-coder:1.5b-instruct", 28, 2, 128),
];

#[test]
fn peak_rss_is_the_model_plus_kv_plus_64_mib() {
    // Smallest model first: the children's maximum only grows, and so do the budgets.
    for (name, layers, kv_heads, head_dim) in MODELS {
        let file = std::fs::metadata(common::model(name)).unwrap().len();
        common::ferrox_ok([
            "run",
            "-m",
            name,
            "--temp",
            "0",
            "-n",
            "128",
            "Write a long story about a robot who learns to paint.",
        ]);
        // f16 keys and values (the default); the cache grows 256 positions at a time, which covers the
        // prompt and the 128 new tokens.
        let kv = layers * kv_heads * head_dim * 2 * 2 * 256;
        let budget = file + kv + (64 << 20);
        let peak = common::children_max_rss();
        eprintln!(
            "{name}: peak {:.1} MiB, budget {:.1} MiB (file {:.1} + KV {:.1} + 64)",
            peak as f64 / 1048576.0,
            budget as f64 / 1048576.0,
            file as f64 / 1048576.0,
            kv as f64 / 1048576.0
        );
        assert!(peak <= budget, "{name}: peak RSS {peak} > budget {budget}");
    }
}
