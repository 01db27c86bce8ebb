//! The KV cache format (`--cache-type-k/-v`, `--attn-bf16`) is one value the decoder takes
//! whole or refuses with an error naming what is unsupported; per-head attention caches take
//! it, latent and recurrent ones stay f32, and a cache in another format is given the
//! decoder's at position 0 or refused (never run as it is).

use ferrox_core::cache::{CacheFormat, CacheFormatError, KvCache, KvType, RowLayout};
use ferrox_models::decoder::{Decoder, ForwardError};
use ferrox_models::state::LayerState;
use std::path::Path;

fn tiny(arch: &str) -> Decoder {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf-tiny")
        .join(arch);
    Decoder::load(&dir).unwrap_or_else(|e| panic!("{arch}: {e}"))
}

fn q8_bf16() -> CacheFormat {
    CacheFormat {
        bf16_products: true,
        ..CacheFormat::uniform(KvType::Q8_0)
    }
}

#[test]
fn a_format_the_heads_cannot_take_is_refused_whole() {
    // Tiny llama's heads are 16 wide: q8_0's blocks are 32.
    let mut d = tiny("llama");
    let e = d.set_cache_format(q8_bf16()).unwrap_err();
    assert_eq!(
        e,
        CacheFormatError::Width {
            ty: KvType::Q8_0,
            block: 32,
            width: 16
        }
    );
    assert_eq!(d.cache_format(), CacheFormat::default());
    assert!(d
        .new_caches()
        .iter()
        .all(|c| c.format() == CacheFormat::default()));
}

#[test]
fn per_head_caches_take_the_format_and_the_others_stay_f32() {
    // Qwen3-Next: three recurrent layers and one of 32-wide heads; DeepSeek-V3: latent rows.
    for (arch, kv_layers) in [("qwen3_next", 1), ("deepseek_v3", 0)] {
        let mut d = tiny(arch);
        d.set_cache_format(q8_bf16()).unwrap();
        assert_eq!(d.cache_format(), q8_bf16());
        let caches = d.new_caches();
        let mut seen = 0;
        for (l, c) in d.layers.iter().zip(&caches) {
            if let LayerState::Kv { .. } = l.attn.state() {
                seen += 1;
                assert_eq!(c.format(), q8_bf16(), "{arch}");
                // q8_0 keys are never tiles, whatever the kernel would read fastest.
                assert_eq!(c.key_layout(), RowLayout::Rows, "{arch}");
            } else {
                assert_eq!(c.format(), CacheFormat::default(), "{arch}");
            }
        }
        assert_eq!(seen, kv_layers, "{arch}");
        // And they run.
        let mut caches = caches;
        d.forward_batch(&[1, 2, 3], 0, &mut caches);
    }
}

#[test]
fn a_cache_in_another_format_is_reformatted_at_0_or_refused() {
    let mut d = tiny("llama");
    let f16 = CacheFormat::uniform(KvType::F16);
    d.set_cache_format(f16).unwrap();
    let shapes: Vec<(usize, usize)> = d
        .layers
        .iter()
        .map(|l| match l.attn.state() {
            LayerState::Kv {
                n_kv_heads,
                head_dim,
            } => (n_kv_heads, head_dim),
            other => panic!("llama layer {other:?}"),
        })
        .collect();
    // Caches a caller built in f32 take the decoder's format at position 0.
    let mut own: Vec<KvCache> = shapes.iter().map(|&(h, w)| KvCache::new(h, w)).collect();
    let got = d.forward_batch(&[5, 6, 7], 0, &mut own);
    assert!(own.iter().all(|c| c.format() == f16 && c.len() == 3));
    let want = d.forward_batch(&[5, 6, 7], 0, &mut d.new_caches());
    assert_eq!(got, want);
    // One that keeps an auxiliary row per position cannot take it: refused by name.
    let mut odd: Vec<KvCache> = shapes
        .iter()
        .map(|&(h, w)| KvCache::shaped(h, w, h * w, 4))
        .collect();
    let e = d.prepare_caches(0, &mut odd).unwrap_err();
    assert_eq!(e, ForwardError::CacheFormat(CacheFormatError::AuxRows));
    assert!(e.to_string().contains("auxiliary row"), "{e}");
}
