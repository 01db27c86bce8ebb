use std::sync::{Arc, Mutex};

use ferrox_core::cache::{CacheFormat, KvCache, KvType, RowLayout};

use super::format::{decode, encode, Kind};
use super::*;
use crate::engine::PrefixCache;

const KEY: CacheKey = CacheKey {
    model: [7; 32],
    k: KvType::F32,
    v: KvType::F16,
};

const KEY_FORMAT: CacheFormat = CacheFormat {
    k: KEY.k,
    v: KEY.v,
    bf16_products: false,
};

fn caches(len: usize, layers: usize) -> Vec<KvCache> {
    (0..layers)
        .map(|l| {
            let mut c = KvCache::new(1, 4);
            c.set_format(KEY_FORMAT, RowLayout::Rows).unwrap();
            for p in 0..len {
                let x = (p * 10 + l) as f32;
                c.append(&[x, x + 1.0, x + 2.0, x + 3.0], &[-x, 0.5, x, 1.0]);
            }
            c
        })
        .collect()
}

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrox-prefix-disk-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn collecting() -> (Warn, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (Arc::new(move |m| s.lock().unwrap().push(m)), seen)
}

fn block_bytes() -> Vec<u8> {
    let c = caches(32, 3);
    let rows: Vec<CacheRows> = c.iter().map(|c| c.copy_rows(16, 32).unwrap()).collect();
    let tokens: Vec<TokenId> = (0..32).collect();
    encode(&KEY, &tokens, &rows)
}

#[test]
fn a_slot_file_holds_any_length_and_is_not_a_block() {
    let c = caches(21, 2);
    let rows: Vec<CacheRows> = c.iter().map(|c| c.copy_rows(0, 21).unwrap()).collect();
    let tokens: Vec<TokenId> = (0..21).collect();
    let bytes = format::encode_as(Kind::Slot, &KEY, &tokens, &rows);
    let f = format::decode_as(Kind::Slot, &bytes, &KEY).unwrap();
    assert_eq!((f.tokens, f.rows), (tokens, rows));
    assert!(matches!(decode(&bytes, &KEY), Err(DiskError::Magic)));
    let block = block_bytes();
    assert!(matches!(
        format::decode_as(Kind::Slot, &block, &KEY),
        Err(DiskError::Magic)
    ));
    let other = CacheKey {
        model: [8; 32],
        ..KEY
    };
    let foreign = format::decode_as(Kind::Slot, &bytes, &other);
    assert!(matches!(foreign, Err(DiskError::Foreign)));
    for n in 0..bytes.len() {
        assert!(
            format::decode_as(Kind::Slot, &bytes[..n], &KEY).is_err(),
            "cut at {n}"
        );
    }
}

#[test]
fn a_block_file_round_trips_and_any_damage_is_refused() {
    let bytes = block_bytes();
    let b = decode(&bytes, &KEY).unwrap();
    assert_eq!(b.tokens, (0..32).collect::<Vec<_>>());
    assert_eq!(b.rows.len(), 3);
    assert_eq!(b.rows[1], caches(32, 3)[1].copy_rows(16, 32).unwrap());
    for n in 0..bytes.len() {
        assert!(decode(&bytes[..n], &KEY).is_err(), "cut at {n}");
    }
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        assert!(decode(&bad, &KEY).is_err(), "flip at {at}");
    }
    let other = CacheKey {
        v: KvType::F32,
        ..KEY
    };
    assert!(matches!(decode(&bytes, &other), Err(DiskError::Foreign)));
}

/// A tree that writes through `disk`, given `history` over `layers` layers.
fn write_tree(disk: &PrefixDisk, history: &[TokenId], layers: usize) {
    let mut t = PrefixCache::new(1 << 20);
    t.set_disk(disk.sink());
    t.insert(history, &caches(history.len(), layers));
    assert!(disk.flush(Duration::from_secs(10)));
}

#[test]
fn blocks_written_by_one_process_are_restored_by_the_next() {
    let root = scratch("restore");
    let (warn, seen) = collecting();
    let history: Vec<TokenId> = (100..150).collect();
    {
        let disk = PrefixDisk::open(&root, KEY, u64::MAX, warn.clone()).unwrap();
        write_tree(&disk, &history, 2);
    }
    let disk = PrefixDisk::open(&root, KEY, u64::MAX, warn).unwrap();
    let blocks = disk.load(1 << 20);
    assert_eq!(blocks.len(), 3, "three whole blocks of 50 tokens");
    let mut t = PrefixCache::new(1 << 20);
    for b in blocks {
        assert!(t.insert_block(&b.tokens, b.rows));
    }
    let path = t.lookup(&history);
    assert_eq!(path.len(), 3);
    let mut dst = vec![KvCache::new(1, 4), KvCache::new(1, 4)];
    for c in &mut dst {
        c.set_format(KEY_FORMAT, RowLayout::Rows).unwrap();
    }
    assert!(t.restore(&path, 0, &mut dst));
    let src = caches(48, 2);
    for (d, s) in dst.iter().zip(&src) {
        assert_eq!(d.copy_rows(0, 48), s.copy_rows(0, 48));
    }
    // A cache too small for all of them takes the shortest prefixes first.
    assert_eq!(disk.load(1).len(), 0);
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_corrupted_file_is_reported_removed_and_not_loaded() {
    let root = scratch("corrupt");
    let (warn, seen) = collecting();
    let disk = PrefixDisk::open(&root, KEY, u64::MAX, warn).unwrap();
    write_tree(&disk, &(0..32).collect::<Vec<_>>(), 2);
    let mut names: Vec<_> = list(disk.dir()).unwrap();
    names.sort_by_key(|f| f.1);
    let deep = disk.dir().join(&names[1].0);
    let mut bytes = fs::read(&deep).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    fs::write(&deep, &bytes).unwrap();
    let blocks = disk.load(1 << 20);
    assert_eq!(blocks.len(), 1, "only the intact first block");
    assert_eq!(blocks[0].tokens.len(), 16);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].contains("checksum"), "{}", seen[0]);
    assert!(!deep.exists());
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn the_directory_stays_within_its_budget_dropping_least_recent_prefixes() {
    let root = scratch("budget");
    let (warn, _) = collecting();
    let one = block_bytes().len() as u64;
    // Room for about three block files of these sizes.
    let disk = PrefixDisk::open(&root, KEY, 3 * one, warn).unwrap();
    write_tree(&disk, &(0..32).collect::<Vec<_>>(), 3);
    write_tree(&disk, &(500..532).collect::<Vec<_>>(), 3);
    let files = list(disk.dir()).unwrap();
    let total: u64 = files.iter().map(|f| f.1).sum();
    assert!(total <= 3 * one, "{total} > {}", 3 * one);
    // The newer prefix is whole; the older one lost its deeper block first.
    let blocks = disk.load(1 << 20);
    let firsts: Vec<_> = blocks
        .iter()
        .map(|b| (b.tokens[0], b.tokens.len()))
        .collect();
    assert!(
        firsts.contains(&(500, 16)) && firsts.contains(&(500, 32)),
        "{firsts:?}"
    );
    assert!(!firsts.contains(&(0, 32)), "{firsts:?}");
    let _ = fs::remove_dir_all(&root);
}
