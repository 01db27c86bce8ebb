//! `ferrox run` speculates by default: stdout is exactly the `--no-spec` text (greedy and
//! seeded sampling), and `--verbose` reports the speculation statistics on stderr only.

mod common;
use common::ferrox_checked as ferrox;

#[test]
fn speculative_run_prints_the_plain_text_and_reports_stats() {
    let prompt = "Add type hints to this function and return it unchanged otherwise:\n\n```python\ndef scale(values, factor):\n    result = []\n    for value in values:\n        result.append(value * factor)\n    return result\n```";
    for sampling in [&["--temp", "0"][..], &["--temp", "0.8", "--seed", "5"][..]] {
        let mut args = vec!["run", "-m", "qwen2.5-coder:0.5b-instruct", "-n", "64"];
        args.extend_from_slice(sampling);
        args.push(prompt);
        let plain = ferrox([&args[..], &["--no-spec"]].concat());
        let spec = ferrox([&args[..], &["--verbose"]].concat());
        assert_eq!(
            String::from_utf8_lossy(&spec.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{sampling:?}"
        );
        let err = String::from_utf8_lossy(&spec.stderr);
        let stats = err
            .lines()
            .find(|l| l.starts_with("speculation:"))
            .unwrap_or_else(|| panic!("no speculation stats on stderr: {err}"));
        eprintln!("{sampling:?}: {stats}");
        assert!(!String::from_utf8_lossy(&spec.stdout).contains("speculation:"));
        assert!(!String::from_utf8_lossy(&plain.stderr).contains("speculation:"));
    }
}
