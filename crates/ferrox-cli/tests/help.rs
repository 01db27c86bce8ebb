//! `ferrox --help` lists the architectures of the registry.

mod common;

#[test]
fn help_lists_registry_architectures() {
    let text = common::ferrox_ok(["--help"]);
    for arch in ferrox_models::arch::ARCHITECTURES {
        for name in arch.hf_model_types.iter().chain(arch.gguf_archs) {
            assert!(text.contains(name), "--help misses {name}:\n{text}");
        }
    }
}
