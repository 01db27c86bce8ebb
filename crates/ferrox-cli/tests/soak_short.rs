//! A short run of `scripts/soak.py` (the 10-minute soak, documented in the README) against
//! the 0.5B with speculation on and short client deadlines: 8 streaming clients and the
//! hostile client for 45 s; no well-behaved request fails, every hostile probe gets its
//! answer, `/health` stays fast and the server stays up.

mod common;

#[test]
fn soak_short_run_passes() {
    let path = common::model("qwen2.5-coder:0.5b-instruct");
    let (server, addr) = common::serve(
        path.to_str().unwrap(),
        &[
            "--parallel",
            "4",
            "-c",
            "2048",
            "--header-timeout",
            "3",
            "--body-timeout",
            "3",
        ],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/soak.py");
    let out = std::process::Command::new("python3")
        .args([
            script,
            "--url",
            &format!("http://{addr}"),
            "--minutes",
            "0.75",
        ])
        .args(["--clients", "8", "--json"])
        .output()
        .unwrap();
    drop(server);
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("soak: {report}");
    let v: serde_json::Value = serde_json::from_str(report.trim()).expect("soak.py's JSON");
    assert!(out.status.success() && v["passed"] == true, "{v}");
    assert!(v["streams_ok"].as_u64().unwrap() > 8, "{v}");
    assert!(v["hostile_probes"].as_object().unwrap().len() >= 6, "{v}");
}
