//! `ferrox --help` lists the architectures of the registry.

use std::process::Command;

#[test]
fn help_lists_registry_architectures() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for arch in ferrox_models::arch::ARCHITECTURES {
        for name in arch.hf_model_types.iter().chain(arch.gguf_archs) {
            assert!(text.contains(name), "--help misses {name}:\n{text}");
        }
    }
}
