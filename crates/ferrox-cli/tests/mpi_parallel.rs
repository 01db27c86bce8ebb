//! Expert and pipeline parallelism under `mpiexec` (issue 22): every MoE family's (and, for
//! the pipeline, some dense families') `ferrox logits --all` is bit-identical to one process
//! at 2 and 4 ranks; greedy `run` (speculation on) at 2 and 4 ranks and the served OpenAI API
//! (4 ranks expert-parallel, 2 pipelined) give one process's text. Needs the binary built with
//! `--features mpi` and MPICH's `mpiexec` (`scripts/test` installs both and runs this file).
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MOE_FAMILIES: [&str; 13] = [
    "glm4_moe",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "glm_moe_dsa_shared_indexer",
    "deepseek_v3",
    "deepseek_v32",
    "qwen3_moe",
    "mixtral",
    "gpt_oss",
    "olmoe",
    "qwen2_moe",
    "granitemoe",
    "qwen3_next",
];

fn mpiexec(ranks: usize) -> Command {
    let mut c = Command::new("mpiexec");
    c.args(["-n", &ranks.to_string(), env!("CARGO_BIN_EXE_ferrox")]);
    c
}

fn tiny(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ferrox-models/tests/fixtures/hf-tiny")
        .join(family)
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferrox-mpi-{}-{name}", std::process::id()))
}

/// The fixture's input ids, comma-separated.
fn fixture_ids(dir: &Path) -> String {
    let ids: Vec<u32> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("input_ids.json")).unwrap())
            .unwrap();
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// `ferrox logits --all` of `dir` on its fixture ids into `out`.
fn logits_args(dir: &Path, out: &Path) -> [String; 10] {
    let (d, o) = (dir.to_str().unwrap(), out.to_str().unwrap());
    let ids = fixture_ids(dir);
    [
        "logits", "-m", d, "--ids", &ids, "--all", "-t", "1", "-o", o,
    ]
    .map(String::from)
}

/// Dense families (and Gemma's sliding windows, Qwen3-Next's recurrent layers among the MoE
/// ones) for pipeline parallelism, which splits any model by layers.
const DENSE_FAMILIES: [&str; 4] = ["llama", "qwen3", "gemma3_text", "phi3"];

#[test]
fn logits_are_bit_identical_at_2_and_4_ranks() {
    logits_match(&MOE_FAMILIES, "--expert-parallel", "expert parallel");
}

#[test]
fn pipelined_logits_are_bit_identical_at_2_and_4_ranks() {
    let families = MOE_FAMILIES.iter().chain(&DENSE_FAMILIES);
    let families: Vec<&str> = families.copied().collect();
    logits_match(&families, "--pipeline-parallel", "pipeline parallel");
}

/// `ferrox logits --all` under `mpiexec -n 2` and `-n 4` with `flag` equals one process's,
/// bit for bit, for every family; rank 0 alone reports (`report`) and writes.
fn logits_match(families: &[&str], flag: &str, report: &str) {
    for &family in families {
        let dir = tiny(family);
        let one = tmp(&format!("{family}-1.npy"));
        let args = |out: &Path| logits_args(&dir, out);
        common::ferrox_ok(args(&one));
        let want = std::fs::read(&one).unwrap();
        std::fs::remove_file(&one).ok();
        for ranks in [2, 4] {
            let out = tmp(&format!("{family}-{ranks}.npy"));
            let run = mpiexec(ranks).args(args(&out)).arg(flag).output().unwrap();
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "{family} at {ranks} ranks: {err}");
            // Rank 0 alone writes: one "wrote" line, one traffic report.
            assert_eq!(err.matches("wrote ").count(), 1, "{family}: {err}");
            assert!(
                err.contains(&format!("{report} over {ranks} ranks")),
                "{family}: {err}"
            );
            assert!(run.stdout.is_empty(), "{family}: stdout from some rank");
            let got = std::fs::read(&out).unwrap();
            std::fs::remove_file(&out).ok();
            assert!(
                got == want,
                "{family}: logits at {ranks} ranks with {flag} differ from one process"
            );
        }
    }
}

/// Every part of the KV cache format reaches the other stages of a pipeline (it travels in
/// each forward's header): typed caches and bf16 attention products give one process's logits
/// at 2 ranks, on families with 32-wide heads (q8_0's blocks) and a hybrid recurrent one.
#[test]
fn pipelined_cache_formats_are_one_process_bits() {
    let formats: [&[&str]; 3] = [
        &["--ctk", "q8_0", "--ctv", "f16"],
        &["--ctk", "bf16", "--ctv", "q8_0"],
        &["--ctk", "f16", "--ctv", "f16", "--attn-bf16"],
    ];
    for family in ["qwen3", "gemma3_text", "qwen3_next"] {
        let dir = tiny(family);
        for flags in formats {
            let one = tmp(&format!("{family}-fmt-1.npy"));
            common::ferrox_ok(
                logits_args(&dir, &one)
                    .iter()
                    .map(String::as_str)
                    .chain(flags.iter().copied()),
            );
            let want = std::fs::read(&one).unwrap();
            std::fs::remove_file(&one).ok();
            let out = tmp(&format!("{family}-fmt-2.npy"));
            let run = mpiexec(2)
                .args(logits_args(&dir, &out))
                .args(flags)
                .arg("--pipeline-parallel")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "{family} {flags:?}: {err}");
            let got = std::fs::read(&out).unwrap();
            std::fs::remove_file(&out).ok();
            assert!(got == want, "{family} {flags:?}: pipelined logits differ");
        }
    }
}

/// `--save-expert-load` writes the router's counts (the same under 2 ranks as in one
/// process); `--expert-load` places experts by them: a load skewed onto expert 0 gives rank 0
/// that expert alone in every MoE layer, and logits stay one process's.
#[test]
fn experts_placed_by_measured_load() {
    let dir = tiny("qwen3_moe");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let (experts, k) = (
        cfg["num_local_experts"].as_u64().unwrap(),
        cfg["num_experts_per_tok"].as_u64().unwrap(),
    );
    let tokens = fixture_ids(&dir).split(',').count() as u64;
    let (one, counted, counted2) = (tmp("load-1.npy"), tmp("load.json"), tmp("load2.json"));
    common::ferrox_ok(logits_args(&dir, &one).iter().chain(&[
        "--save-expert-load".to_string(),
        counted.to_str().unwrap().to_string(),
    ]));
    let want = std::fs::read(&one).unwrap();
    let load: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&counted).unwrap()).unwrap();
    let layers = load["layers"].as_array().unwrap();
    let moe: Vec<usize> = (0..layers.len())
        .filter(|&l| !layers[l].is_null())
        .collect();
    assert!(!moe.is_empty());
    for &l in &moe {
        let c = layers[l].as_array().unwrap();
        assert_eq!(c.len() as u64, experts);
        let sum: u64 = c.iter().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(
            sum,
            tokens * k,
            "layer {l}: every token counts once per expert"
        );
    }
    let run2 = |extra: &[&str]| {
        let out = tmp("load-2.npy");
        let r = mpiexec(2)
            .args(logits_args(&dir, &out))
            .arg("--expert-parallel")
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr).into_owned();
        let got = std::fs::read(&out).ok();
        std::fs::remove_file(&out).ok();
        (r.status.success(), err, got)
    };
    let (ok, err, got) = run2(&["--save-expert-load", counted2.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(got.as_ref() == Some(&want));
    let again = std::fs::read_to_string(&counted2).unwrap();
    assert_eq!(again, std::fs::read_to_string(&counted).unwrap());

    let skewed: Vec<serde_json::Value> = layers
        .iter()
        .map(|l| match l.as_array() {
            None => serde_json::Value::Null,
            Some(c) => (0..c.len())
                .map(|e| if e == 0 { 1000 } else { 0 })
                .collect(),
        })
        .collect();
    std::fs::write(
        &counted,
        serde_json::json!({ "layers": skewed }).to_string(),
    )
    .unwrap();
    let (ok, err, got) = run2(&["--expert-load", counted.to_str().unwrap()]);
    assert!(ok, "{err}");
    for &l in &moe {
        let want_ranges = format!("layer {l}: 0..1 1..{experts}");
        assert!(err.contains(&want_ranges), "{want_ranges} in {err}");
    }
    assert!(
        got.as_ref() == Some(&want),
        "logits under a weighted placement"
    );

    // A file for another model (wrong expert count) is refused, not guessed around.
    let short: Vec<serde_json::Value> = layers
        .iter()
        .map(|l| match l {
            serde_json::Value::Null => serde_json::Value::Null,
            _ => serde_json::json!([1, 2]),
        })
        .collect();
    std::fs::write(&counted, serde_json::json!({ "layers": short }).to_string()).unwrap();
    let (ok, err, _) = run2(&["--expert-load", counted.to_str().unwrap()]);
    assert!(!ok && err.contains("2 expert weights"), "{err}");
    for f in [one, counted, counted2] {
        std::fs::remove_file(f).ok();
    }
}

/// A GLM-4.5-Air-structured random GGUF at toy size with the qwen2.5-coder tokenizer
/// (`bench/moe-gguf --small`): 16 experts, top 4, a shared expert, a dense first layer.
fn small_glm() -> PathBuf {
    let out = tmp("glm45-air-small.gguf");
    if !out.exists() {
        let tokenizer = common::model(common::DEFAULT_MODEL);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/moe-gguf");
        let st = common::server::python()
            .arg(&script)
            .args([
                "glm45-air",
                out.to_str().unwrap(),
                "--small",
                "--layers",
                "3",
            ])
            .arg("--tokenizer")
            .arg(&tokenizer)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "bench/moe-gguf failed");
    }
    out
}

const PROMPT: &str = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n";

#[test]
fn greedy_run_and_serve_answer_as_one_process() {
    let model = small_glm();
    let m = model.to_str().unwrap();
    // A repeat penalty below 1 makes the random model repeat itself, so the drafter finds
    // matches (drafts, some rejected); without it nothing is ever drafted.
    let plain = [
        "run",
        "-m",
        m,
        "--temp",
        "0",
        "--repeat-penalty",
        "0.2",
        "-n",
        "48",
        "-t",
        "1",
        PROMPT,
    ];
    let want = common::ferrox_ok(plain.iter().chain(&["--no-spec"]));
    assert!(!want.trim().is_empty());
    for flag in ["--expert-parallel", "--pipeline-parallel"] {
        for ranks in [2, 4] {
            // Speculation on (the default) under MPI, plain in one process; `--verbose` shows the
            // drafts, some rejected, so caches were cut back on the ranks that hold them.
            let run = mpiexec(ranks)
                .args(plain)
                .args([flag, "--verbose"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "{flag} {ranks} ranks: {err}");
            assert_eq!(
                String::from_utf8_lossy(&run.stdout),
                want,
                "{flag} {ranks} ranks"
            );
            let (drafted, accepted) = drafts(&err);
            assert!(
                drafted > accepted,
                "{flag} {ranks} ranks: no rejected draft: {err}"
            );
        }
    }
    // The served chats: no repeat penalty, 24 tokens (what `openai_client.py` asks for).
    let plain = ["run", "-m", m, "--temp", "0", "-n", "24", "-t", "1", PROMPT];
    let want = common::ferrox_ok(plain.iter().chain(&["--no-spec"]));
    serve_under(4, "--expert-parallel", m, &want);
    serve_under(2, "--pipeline-parallel", m, &want);
    std::fs::remove_file(&model).ok();
}

/// Tokens drafted and accepted, from `run --verbose`'s speculation line.
fn drafts(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("speculation:"))
        .unwrap_or_else(|| panic!("no speculation line in {stderr}"));
    let before = |word: &str| -> u64 {
        let i = line.find(word).unwrap();
        line[..i]
            .split_whitespace()
            .last()
            .unwrap()
            .parse()
            .unwrap()
    };
    (before(" tokens drafted"), before(" accepted ("))
}

/// `mpiexec -n RANKS ferrox serve FLAG`: the OpenAI client's greedy chats (alone, streamed,
/// four at once over two slots — two sequences per step, so pipelined steps carry two
/// micro-batches) equal `ferrox run`'s text; a drain stops every rank cleanly.
fn serve_under(ranks: usize, flag: &str, model: &str, want: &str) {
    let mut cmd = mpiexec(ranks);
    cmd.args(["serve", "-m", model, "--port", "0", "--parallel", "2"])
        .args(["-t", "1", "--api-key", "test-key", flag]);
    let (mut server, addr) = common::serve_with(cmd);
    let v = common::server::python_json(
        "openai_client.py",
        &[
            format!("http://{addr}/v1"),
            model.into(),
            PROMPT.into(),
            "24".into(),
        ],
    );
    let chat = v["chat"].as_str().unwrap().to_string();
    // The chat goes through the template, `run` too: same prompt tokens, same text.
    assert_eq!(
        Some(chat.as_str()),
        want.strip_suffix('\n'),
        "served chat vs `ferrox run`"
    );
    assert_eq!(v["chat_stream"], chat.as_str());
    for t in v["chat_concurrent"].as_array().unwrap() {
        assert_eq!(
            t,
            chat.as_str(),
            "concurrent chat under {ranks} ranks, {flag}"
        );
    }
    let drain = std::net::TcpStream::connect(&addr).and_then(|mut s| {
        use std::io::{Read, Write};
        let req = format!(
            "POST /admin/drain HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer test-key\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        s.write_all(req.as_bytes())?;
        s.read_to_end(&mut Vec::new())
    });
    let stopped = drain.is_ok() && {
        let t0 = std::time::Instant::now();
        loop {
            if let Ok(Some(st)) = server.child().try_wait() {
                break st.success();
            }
            if t0.elapsed().as_secs() > 60 {
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    // Not stopped: dropping `server` kills it.
    assert!(stopped, "mpiexec did not exit 0 after the drain");
}
