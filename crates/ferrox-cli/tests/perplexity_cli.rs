//! `ferrox perplexity` against llama-perplexity on the same text: llama.cpp (this machine,
//! `-c 512 -t 2 --chunks 4` on tests/fixtures/ppl.txt, the fixtures' `llamacpp/ppl.txt`) gives
//! gemma3:270m PPL = 15.0145 after four chunks; the full file gives 12.0627 (ferrox: 12.0595)
//! and qwen2.5-coder:0.5b-instruct 8.8342 (ferrox: 8.8278). The last stdout line is exactly
//! `PPL = <value>`.

mod common;

#[test]
fn perplexity_of_four_chunks_is_within_one_percent_of_llama_cpp() {
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ppl.txt");
    let stdout = common::ferrox_ok([
        "perplexity",
        "-m",
        "gemma3:270m",
        "-f",
        text,
        "-c",
        "512",
        "--chunks",
        "4",
    ]);
    let last = stdout.lines().last().unwrap();
    let ppl: f64 = last
        .strip_prefix("PPL = ")
        .unwrap_or_else(|| panic!("last line is not `PPL = <value>`: {last:?}"))
        .parse()
        .unwrap();
    let want = 15.0145;
    assert!(
        (ppl / want - 1.0).abs() < 0.01,
        "PPL {ppl} vs llama.cpp {want}"
    );
}
