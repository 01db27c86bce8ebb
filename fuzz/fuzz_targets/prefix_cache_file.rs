//! Fuzzes the reader of the prompt cache's block files (`ferrox serve --cache-dir`) and of
//! saved slot files (llama-server's `/slots/{id}?action=restore`, the same format under its
//! own magic): any bytes are either refused with a typed error or give a block that a prefix
//! cache accepts or declines (a slot's rows that caches take or refuse) without a panic; a panic, an abort or an allocation past `-malloc_limit_mb` is a
//! finding.
//!
//! Random bytes never pass the checksum, so an input is mostly edits to a valid file (bytes
//! set, the file cut) whose checksum is then recomputed: the parser past the checksum sees
//! hostile counts, types and shapes. An input that starts with the file magic is read as is.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use ferrox_core::cache::{CacheFormat, KvCache, KvType, RowLayout};
use ferrox_models::engine::prefix_disk::format::{
    decode, decode_as, encode_as, CacheKey, Kind, MAGIC, SLOT_MAGIC,
};
use ferrox_models::engine::PrefixCache;
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

const KEY: CacheKey = CacheKey {
    model: [3; 32],
    k: KvType::Q8_0,
    v: KvType::F16,
};

/// A valid file: one block's rows per layer, or (a slot) the whole history's.
fn base(layers: usize, blocks: usize, kind: Kind) -> Vec<u8> {
    let len = 16 * blocks;
    let rows: Vec<_> = (0..layers)
        .map(|l| {
            let mut c = KvCache::new(1, 32);
            let format = CacheFormat {
                k: KEY.k,
                v: KEY.v,
                bf16_products: false,
            };
            c.set_format(format, RowLayout::Rows).expect("format");
            for p in 0..len {
                let row: Vec<f32> = (0..32).map(|i| (p + i + l) as f32 * 0.1).collect();
                c.append(&row, &row);
            }
            let from = if kind == Kind::Slot { 0 } else { len - 16 };
            c.copy_rows(from, len).expect("rows")
        })
        .collect();
    let tokens: Vec<usize> = (0..len).collect();
    encode_as(kind, &KEY, &tokens, &rows)
}

#[derive(Debug, Arbitrary)]
struct Input {
    layers: u8,
    blocks: u8,
    /// (offset, byte) writes.
    sets: Vec<(u16, u8)>,
    cut: Option<u16>,
    slot: bool,
}

fn run(bytes: &[u8]) {
    let Ok(b) = decode(bytes, &KEY) else { return };
    let mut t = PrefixCache::new(1 << 20);
    t.insert_block(&b.tokens, b.rows);
    let path = t.lookup(&b.tokens);
    let mut caches: Vec<KvCache> = (0..4).map(|_| KvCache::new(1, 32)).collect();
    t.restore(&path, 0, &mut caches);
}

/// What restoring a slot does with a file's rows: appends them to empty caches.
fn run_slot(bytes: &[u8]) {
    let Ok(f) = decode_as(Kind::Slot, bytes, &KEY) else {
        return;
    };
    let mut caches: Vec<KvCache> = (0..4).map(|_| KvCache::new(1, 32)).collect();
    for (c, r) in caches.iter_mut().zip(&f.rows) {
        c.append_rows(r);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(&MAGIC) {
        return run(data);
    }
    if data.starts_with(&SLOT_MAGIC) {
        return run_slot(data);
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let kind = if input.slot { Kind::Slot } else { Kind::Block };
    let (layers, blocks) = (input.layers % 3, input.blocks % 3);
    let mut bytes = base(usize::from(layers) + 1, usize::from(blocks) + 1, kind);
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
    match kind {
        Kind::Block => run(&bytes),
        Kind::Slot => run_slot(&bytes),
    }
});
