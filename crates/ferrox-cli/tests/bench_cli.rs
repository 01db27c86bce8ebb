//! `ferrox bench -o json` on a real model: a JSON array with llama-bench's field names, one
//! entry per test, with plausible values.

mod common;

#[test]
fn bench_json_has_llama_bench_fields() {
    let model = common::model("gemma3:270m");
    let stdout = common::ferrox_ok([
        "bench",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "2",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
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

/// `bench spec -p A -p B`: each prompt file is one more workload prompt, every mode's output
/// equal to plain decoding's.
#[test]
fn bench_spec_takes_several_prompt_files() {
    let model = common::model("gemma3:270m");
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("story.txt", "Tell a short story about a cat."),
        ("rain.txt", "Why does it rain?"),
    ];
    let mut args = vec!["bench", "spec", "-m", model.to_str().unwrap()];
    let paths: Vec<String> = files
        .iter()
        .map(|(name, text)| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.to_str().unwrap().to_string()
        })
        .collect();
    for p in &paths {
        args.extend(["-p", p]);
    }
    args.extend([
        "--no-control",
        "-n",
        "8",
        "--drafters",
        "longest",
        "-t",
        "2",
    ]);
    let out = common::ferrox_checked(args);
    let (stdout, stderr) = (common::stdout(&out), String::from_utf8_lossy(&out.stderr));
    // Per prompt and mode on stderr; per set and mode, summed over the prompts, on stdout.
    for (name, _) in files {
        for mode in ["plain", "longest"] {
            assert!(
                stderr
                    .lines()
                    .any(|l| l.starts_with(&format!("workload {name}")) && l.contains(mode)),
                "no {mode} row for {name}:\n{stderr}"
            );
        }
    }
    let table: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| workload"))
        .collect();
    assert_eq!(table.len(), 2, "{stdout}");
    for row in table {
        assert!(row.contains("| 16 |"), "8 tokens of each prompt: {row}");
        assert!(row.ends_with("| yes |"), "{row}");
    }
}
