//! `ferrox bench -o json` on a real model: a JSON array with llama-bench's field names, one
//! entry per test, with plausible values.

use std::process::Command;

#[test]
fn bench_json_has_llama_bench_fields() {
    let model = ferrox_hub::ensure_model("gemma3:270m").expect("gemma3:270m");
    let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .args(["bench", "-m"])
        .arg(&model)
        .args(["-p", "8", "-n", "4", "-r", "2", "-t", "2", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let rows = v.as_array().expect("a JSON array");
    assert_eq!(rows.len(), 2, "one pp and one tg test");
    for (row, (p, g)) in rows.iter().zip([(8, 0), (0, 4)]) {
        assert_eq!(row["n_prompt"], p);
        assert_eq!(row["n_gen"], g);
        assert_eq!(row["n_threads"], 2);
        assert!(row["model_filename"]
            .as_str()
            .unwrap()
            .ends_with("gemma-3-270m-q4_k_m.gguf"));
        assert!(row["model_size"].as_u64().unwrap() > 100_000_000);
        assert!(row["model_n_params"].as_u64().unwrap() > 200_000_000);
        let avg = row["avg_ts"].as_f64().unwrap();
        assert!(avg > 0.0 && avg.is_finite());
        assert!(row["stddev_ts"].as_f64().unwrap() >= 0.0);
        let samples = row["samples_ts"].as_array().unwrap();
        assert_eq!(samples.len(), 2);
        let mean = samples.iter().map(|s| s.as_f64().unwrap()).sum::<f64>() / 2.0;
        assert!((mean - avg).abs() <= 1e-9 * avg.max(1.0));
        assert_eq!(row["samples_ns"].as_array().unwrap().len(), 2);
    }
    // Decode reads the whole model (tied embedding = LM head) once per token.
    let per_token = rows[1]["weight_bytes_per_token"].as_u64().unwrap();
    assert!(per_token > 200_000_000, "{per_token}");
    assert!(rows[1]["gb_per_s"].as_f64().unwrap() > 0.0);
}
