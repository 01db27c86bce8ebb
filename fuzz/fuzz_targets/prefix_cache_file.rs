//! Fuzzes the reader of the prompt cache's block files (`ferrox serve --cache-dir`): any
//! bytes are either refused with a typed error or give a block that a prefix cache accepts or
//! declines without a panic; a panic, an abort or an allocation past `-malloc_limit_mb` is a
//! finding.
//!
//! Random bytes never pass the checksum, so an input is mostly edits to a valid file (bytes
//! set, the file cut) whose checksum is then recomputed: the parser past the checksum sees
//! hostile counts, types and shapes. An input that starts with the file magic is read as is.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use ferrox_core::cache::{KvCache, KvType};
use ferrox_models::engine::prefix_disk::format::{decode, encode, CacheKey, MAGIC};
use ferrox_models::engine::PrefixCache;
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

const KEY: CacheKey = CacheKey {
    model: [3; 32],
    k: KvType::Q8_0,
    v: KvType::F16,
};

fn base(layers: usize, blocks: usize) -> Vec<u8> {
    let len = 16 * blocks;
    let rows: Vec<_> = (0..layers)
        .map(|l| {
            let mut c = KvCache::new(1, 32);
            c.set_types(KEY.k, KEY.v).expect("types");
            for p in 0..len {
                let row: Vec<f32> = (0..32).map(|i| (p + i + l) as f32 * 0.1).collect();
                c.append(&row, &row);
            }
            c.copy_rows(len - 16, len).expect("rows")
        })
        .collect();
    let tokens: Vec<usize> = (0..len).collect();
    encode(&KEY, &tokens, &rows)
}

#[derive(Debug, Arbitrary)]
struct Input {
    layers: u8,
    blocks: u8,
    /// (offset, byte) writes.
    sets: Vec<(u16, u8)>,
    cut: Option<u16>,
}

fn run(bytes: &[u8]) {
    let Ok(b) = decode(bytes, &KEY) else { return };
    let mut t = PrefixCache::new(1 << 20);
    t.insert_block(&b.tokens, b.rows);
    let path = t.lookup(&b.tokens);
    let mut caches: Vec<KvCache> = (0..4).map(|_| KvCache::new(1, 32)).collect();
    t.restore(&path, 0, &mut caches);
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(&MAGIC) {
        return run(data);
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut bytes = base(usize::from(input.layers % 3) + 1, usize::from(input.blocks % 3) + 1);
    bytes.truncate(bytes.len() - 32);
    for (at, x) in input.sets.into_iter().take(16) {
        let n = bytes.len();
        bytes[usize::from(at) % n] = x;
    }
    if let Some(cut) = input.cut {
        bytes.truncate(usize::from(cut) % (bytes.len() + 1));
    }
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    run(&bytes);
});
