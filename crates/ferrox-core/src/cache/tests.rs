use super::*;

#[test]
fn append_truncate_keeps_prefix() {
    let mut c = KvCache::new(2, 3);
    for p in 0..5 {
        let k: Vec<f32> = (0..6).map(|i| (p * 10 + i) as f32).collect();
        c.append(&k, &k);
    }
    assert_eq!(c.len(), 5);
    c.truncate(2);
    assert_eq!(c.len(), 2);
    assert_eq!(c.key(1)[0], 10.0);
    c.truncate(7);
    assert_eq!(c.len(), 2);
    let k = vec![99.0; 6];
    c.append(&k, &k);
    assert_eq!(c.key(2)[5], 99.0);
}

#[test]
fn empty_cache_takes_model_geometry() {
    let mut c = KvCache::new(2, 4);
    c.ensure_shape(1, 12, 0).unwrap();
    c.append(&[0.0; 12], &[]);
    assert!(c.ensure_shape(2, 4, 8).is_err());
}

#[test]
fn aux_rows_follow_truncate() {
    let mut c = KvCache::new(1, 2);
    c.ensure_aux_width(3).unwrap();
    for p in 0..4 {
        let x = p as f32;
        c.append_with_aux(&[x, x], &[x, x], &[x, x, x]);
    }
    c.truncate(2);
    assert_eq!(c.aux().len(), 6);
    c.append_with_aux(&[9.0; 2], &[9.0; 2], &[9.0; 3]);
    assert_eq!(&c.aux()[6..], &[9.0; 3]);
    assert!(c.ensure_aux_width(4).is_err());
    c.clear();
    c.ensure_aux_width(0).unwrap();
    c.append(&[1.0; 2], &[1.0; 2]);
}

#[test]
fn recurrent_blobs_are_forgotten_past_the_cut() {
    let mut c = KvCache::new(1, 1);
    for p in 0..6 {
        c.append(&[p as f32], &[p as f32]);
    }
    {
        let mut r = c.recurrent(3);
        r.state.copy_from_slice(&[1.0, 2.0, 3.0]);
        *r.state_at = Some(6);
        *r.checkpoint_at = Some(2);
        r.swap();
        assert_eq!(*r.state_at, Some(2));
        assert_eq!(r.checkpoint, &vec![1.0, 2.0, 3.0]);
        r.swap();
    }
    c.truncate(4);
    assert_eq!((c.state_at(), c.checkpoint_at()), (None, Some(2)));
    c.truncate(2);
    assert_eq!(c.checkpoint_at(), Some(2));
    c.clear();
    assert_eq!(c.checkpoint_at(), None);
    // Another width resets the blobs.
    let r = c.recurrent(4);
    assert_eq!(r.state.len(), 4);
}

#[test]
fn bounded_cache_forgets_rows_before_the_window() {
    let mut c = KvCache::new(1, 1);
    for p in 0..10 {
        c.append(&[p as f32], &[p as f32]);
    }
    c.forget_before(8, 3);
    assert_eq!((c.first_row(), c.keys().len()), (0, 10), "unbounded: no-op");
    c.set_bounded(true);
    c.forget_before(8, 3);
    assert_eq!((c.first_row(), c.len(), c.keys().len()), (5, 10, 5));
    assert_eq!(c.key(5), &[5.0]);
    assert_eq!(c.recurrent(1).first, 5);
    assert!(c.restorable(8) && c.restorable(0) && !c.restorable(7));
    c.truncate(9);
    assert_eq!((c.len(), c.keys().len(), c.value(8)), (9, 4, &[8.0][..]));
    // A cut the rows cannot serve empties the cache.
    c.truncate(6);
    assert_eq!((c.len(), c.first_row(), c.keys().len()), (0, 0, 0));
    assert!(c.restorable(3));
}

/// f16 / bf16 / q8_0 storage: rows round-trip through copy/append and truncate like f32 ones,
/// and the type can only change while empty, to widths its blocks divide.
#[test]
fn typed_rows_copy_truncate_and_refusals() {
    for ty in [KvType::F16, KvType::Bf16, KvType::Q8_0] {
        let mut c = KvCache::new(2, 32);
        c.set_format(CacheFormat::uniform(ty), RowLayout::Rows)
            .unwrap();
        for p in 0..5 {
            let row: Vec<f32> = (0..64).map(|i| (p * 64 + i) as f32 / 50.0 - 3.0).collect();
            c.append(&row, &row);
        }
        assert_eq!(
            c.set_format(CacheFormat::default(), RowLayout::Rows),
            Err(CacheFormatError::InUse { len: 5 })
        );
        let rows = c.copy_rows(0, 3).unwrap();
        let mut d = KvCache::new(2, 32);
        assert!(d.append_rows(&rows));
        assert_eq!(d.types(), (ty, ty));
        let (mut a, mut b) = (vec![0f32; 3 * 64], vec![0f32; 3 * 64]);
        c.keys_view().read(0, &mut a);
        d.keys_view().read(0, &mut b);
        assert_eq!(a, b);
        // Widened values stay close to what was stored.
        assert!(
            (a[65] - (65.0 / 50.0 - 3.0)).abs() < 0.02,
            "{ty:?}: {}",
            a[65]
        );
        c.truncate(2);
        assert_eq!(
            (c.len(), c.keys_view().len(), c.stored_bytes()),
            (2, 128, 2 * 2 * ty.row_bytes(64))
        );
    }
    let q8_keys = CacheFormat {
        k: KvType::Q8_0,
        ..CacheFormat::default()
    };
    let mut odd = KvCache::new(1, 40);
    assert_eq!(
        odd.set_format(q8_keys, RowLayout::Rows),
        Err(CacheFormatError::Width {
            ty: KvType::Q8_0,
            block: 32,
            width: 40
        })
    );
    let f16 = CacheFormat::uniform(KvType::F16);
    assert!(odd.set_format(f16, RowLayout::Rows).is_ok());
    let mut odd = KvCache::new(2, 3);
    assert_eq!(
        odd.set_format(CacheFormat::uniform(KvType::Bf16), RowLayout::Rows),
        Err(CacheFormatError::Width {
            ty: KvType::Bf16,
            block: 2,
            width: 3
        })
    );
}

/// One call sets the whole format: types, bf16 products and key layout together, or nothing
/// when any part is refused; setting the format a cache has is a no-op even while it holds
/// rows, and the messages name what is unsupported.
#[test]
fn format_is_set_whole_or_refused() {
    let mut c = KvCache::new(2, 32);
    assert_eq!(c.format(), CacheFormat::default());
    let f = CacheFormat {
        k: KvType::F16,
        v: KvType::Q8_0,
        bf16_products: true,
    };
    c.set_format(f, RowLayout::Tiles).unwrap();
    assert_eq!((c.format(), c.key_layout()), (f, RowLayout::Tiles));
    assert_eq!(c.types(), (KvType::F16, KvType::Q8_0));
    assert!(c.bf16_products());
    // q8_0 keys cannot be tiles: refused, and the cache keeps its format.
    let q8 = CacheFormat::uniform(KvType::Q8_0);
    let err = c.set_format(q8, RowLayout::Tiles).unwrap_err();
    assert_eq!(err, CacheFormatError::Tiles { ty: KvType::Q8_0 });
    assert!(err.to_string().contains("q8_0 keys"), "{err}");
    assert_eq!((c.format(), c.key_layout()), (f, RowLayout::Tiles));
    // An odd width is refused whole too (no half-applied types).
    let mut odd = KvCache::new(1, 48);
    let err = odd.set_format(q8, RowLayout::Rows).unwrap_err();
    assert_eq!(
        err.to_string(),
        "KV cache type q8_0 needs head widths that are multiples of 32 (this model's: 48)"
    );
    assert_eq!(odd.format(), CacheFormat::default());
    // While holding rows: the same format is fine, another is refused.
    let row = vec![0.5f32; 64];
    c.append(&row, &row);
    assert_eq!(c.set_format(f, RowLayout::Tiles), Ok(()));
    let plain = CacheFormat {
        bf16_products: false,
        ..f
    };
    assert_eq!(
        c.set_format(plain, RowLayout::Tiles),
        Err(CacheFormatError::InUse { len: 1 })
    );
    assert_eq!(
        c.set_format(f, RowLayout::Rows),
        Err(CacheFormatError::InUse { len: 1 })
    );
    // A cache with auxiliary rows keeps f32.
    let mut latent = KvCache::shaped(1, 32, 0, 8);
    assert_eq!(
        latent.set_format(CacheFormat::default(), RowLayout::Rows),
        Ok(())
    );
    assert_eq!(
        latent.set_format(CacheFormat::uniform(KvType::F16), RowLayout::Rows),
        Err(CacheFormatError::AuxRows)
    );
}

/// Keys laid out in tiles of 16 positions (bf16: in pairs of columns) read back as the rows they
/// were given, through truncation, refills, copies at any offset (into caches of either
/// layout), and dropping leading rows.
#[test]
fn tiled_keys_read_back_as_rows() {
    // Values every type holds exactly (at most 8 significant bits).
    let row = |p: usize| -> Vec<f32> { (0..6).map(|i| ((p * 6 + i) % 256) as f32 / 8.0).collect() };
    // Positions `from..to` of `c` hold rows `shift + from..`.
    let check = |c: &KvCache, from: usize, to: usize, shift: usize| {
        let mut k = vec![0f32; 6];
        for p in from..to {
            c.read_key(p, &mut k);
            assert_eq!(k, row(p - from + shift), "position {p}");
        }
    };
    for ty in [KvType::F32, KvType::F16, KvType::Bf16] {
        // Rows of 6 values: 2 heads of 3, or (bf16 pairs) 3 heads of 2.
        let (nkv, hd) = if ty == KvType::Bf16 { (3, 2) } else { (2, 3) };
        let mut c = KvCache::new(nkv, hd);
        c.set_format(CacheFormat::uniform(ty), RowLayout::Tiles)
            .unwrap();
        assert_eq!(c.key_layout(), RowLayout::Tiles);
        for p in 0..40 {
            c.append(&row(p), &row(p));
        }
        assert!(c.keys().is_empty(), "no f32 rows view of tiles");
        assert_eq!(
            c.set_format(CacheFormat::uniform(ty), RowLayout::Rows),
            Err(CacheFormatError::InUse { len: 40 })
        );
        check(&c, 0, 40, 0);
        // Whole tiles are stored: 3 of 16 positions × 6 values.
        assert_eq!(c.keys_view().len(), 3 * 16 * 6);
        c.truncate(21);
        assert_eq!(c.keys_view().len(), 2 * 16 * 6);
        for p in 21..37 {
            c.append(&row(p), &row(p));
        }
        check(&c, 0, 37, 0);
        for (from, to) in [(0, 37), (16, 37), (5, 30), (33, 37)] {
            let rows = c.copy_rows(from, to).unwrap();
            for layout in [RowLayout::Rows, RowLayout::Tiles] {
                // An empty cache takes the copied layout; one holding rows keeps its own.
                let mut d = KvCache::new(nkv, hd);
                d.set_format(CacheFormat::uniform(ty), layout).unwrap();
                for p in 0..3 {
                    d.append(&row(100 + p), &row(100 + p));
                }
                assert!(d.append_rows(&rows));
                assert_eq!((d.len(), d.key_layout()), (to - from + 3, layout));
                check(&d, 0, 3, 100);
                check(&d, 3, d.len(), from);
                let mut e = KvCache::new(nkv, hd);
                assert!(e.append_rows(&rows));
                assert_eq!(e.key_layout(), RowLayout::Tiles);
                check(&e, 0, e.len(), from);
            }
        }
        // Dropping leading rows: whole tiles, then a part of one (the rest move lanes).
        c.set_bounded(true);
        c.forget_before(16, 0);
        check(&c, 16, 37, 16);
        c.forget_before(21, 0);
        assert_eq!(c.first_row(), 21);
        check(&c, 21, 37, 21);
    }
    let mut q = KvCache::new(1, 32);
    let q8 = CacheFormat::uniform(KvType::Q8_0);
    q.set_format(q8, RowLayout::Rows).unwrap();
    assert_eq!(q.key_layout(), RowLayout::Rows);
}

/// Swapping two positions exchanges their keys and values as stored, in every type and
/// layout (lanes of a tile too), and touches nothing else; swapping back restores the bits.
#[test]
fn swapped_positions_exchange_their_rows() {
    let (nkv, hd, n) = (2, 32, 37);
    let row = |p: usize| -> Vec<f32> {
        (0..nkv * hd)
            .map(|i| ((p * 7 + i * 3) % 29) as f32 / 4.0 - 3.0)
            .collect()
    };
    let layouts = [RowLayout::Rows, RowLayout::Tiles];
    for (ty, layout) in [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0]
        .into_iter()
        .flat_map(|t| layouts.map(|l| (t, l)))
        .filter(|&(t, l)| l == RowLayout::Rows || t.tileable())
    {
        let mut c = KvCache::new(nkv, hd);
        c.set_format(CacheFormat::uniform(ty), layout).unwrap();
        for p in 0..n {
            c.append(&row(p), &row(p + 100));
        }
        let read = |c: &KvCache| -> Vec<(Vec<f32>, Vec<f32>)> {
            let mut v = vec![0f32; nkv * hd * n];
            c.values_view().read(0, &mut v);
            (0..n)
                .map(|p| {
                    let mut k = vec![0f32; nkv * hd];
                    c.read_key(p, &mut k);
                    (k, v[p * nkv * hd..(p + 1) * nkv * hd].to_vec())
                })
                .collect()
        };
        let before = read(&c);
        let stored = c.clone();
        for (a, b) in [(3, 3), (1, 17), (20, 36), (35, 16)] {
            c.swap_positions(a, b);
            let mut want = before.clone();
            want.swap(a, b);
            assert_eq!(read(&c), want, "{ty:?} {layout:?}: swap {a} {b}");
            c.swap_positions(a, b);
            assert_eq!(
                (c.keys_view().len(), read(&c)),
                (stored.keys_view().len(), before.clone()),
                "{ty:?} {layout:?}: swapped back"
            );
        }
    }
}
