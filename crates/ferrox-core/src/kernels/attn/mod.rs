//! Attention over one KV head's cached rows for a block of query rows: the tiled online-softmax
//! kernel (`flash/`) where AVX-512 applies, the two-pass per-row path (`attend_group`)
//! elsewhere. Either way a query's result depends only on its own position and the cache, so
//! a block of rows equals the same rows one at a time bit for bit.

use super::{attend_group, isa, HeadKv, Isa, Scoring};
use crate::cache::{KvSlice, RowLayout, TILE_ROWS};

#[cfg(target_arch = "x86_64")]
mod flash;

/// One KV head's view of a cache whose rows may be stored as f16 or q8_0: rows of `stride`
/// values, this head's `dim` columns from `col` (as [`HeadKv`], whose f32 form it generalises).
/// Keys may be laid out in tiles of 16 positions ([`RowLayout::Tiles`]); values are rows.
#[derive(Clone, Copy)]
pub struct TypedKv<'a> {
    pub keys: KvSlice<'a>,
    pub key_layout: RowLayout,
    pub values: KvSlice<'a>,
    pub stride: usize,
    pub col: usize,
    pub dim: usize,
}

impl<'a> TypedKv<'a> {
    /// The f32 view, when both sides are stored as f32 rows.
    pub(super) fn f32(&self) -> Option<HeadKv<'a>> {
        match (self.keys, self.values) {
            (KvSlice::F32(keys), KvSlice::F32(values)) if self.key_layout == RowLayout::Rows => {
                Some(HeadKv {
                    keys,
                    values,
                    stride: self.stride,
                    col: self.col,
                    dim: self.dim,
                })
            }
            _ => None,
        }
    }

    /// This head's key at position `pos` widened to f32 (`out` is `dim` long).
    pub(super) fn read_key(&self, pos: usize, out: &mut [f32]) {
        (self.keys).read_row(self.key_layout, pos, self.stride, self.col, out);
    }

    /// Key values the cache must hold for positions `..end`.
    fn keys_needed(&self, end: usize) -> usize {
        match self.key_layout {
            RowLayout::Rows => end * self.stride,
            RowLayout::Tiles => end.div_ceil(TILE_ROWS) * TILE_ROWS * self.stride,
        }
    }
}

impl<'a> From<HeadKv<'a>> for TypedKv<'a> {
    fn from(kv: HeadKv<'a>) -> Self {
        TypedKv {
            keys: KvSlice::F32(kv.keys),
            key_layout: RowLayout::Rows,
            values: KvSlice::F32(kv.values),
            stride: kv.stride,
            col: kv.col,
            dim: kv.dim,
        }
    }
}

/// Key positions per tile of the tiled kernel (one zmm of scores).
pub(super) const TILE: usize = 16;

/// Per-thread scratch of [`attend_rows`]: a transposed key tile (keys stored as rows), every query's scores for one
/// tile, the running max, sum and output accumulators (or the two-pass path's score rows).
#[derive(Default)]
pub struct FlashScratch {
    pub(super) kt: Vec<f32>,
    pub(super) s: Vec<f32>,
    pub(super) m: Vec<f32>,
    pub(super) l: Vec<f32>,
    pub(super) acc: Vec<f32>,
    pub(super) corr: Vec<f32>,
    /// A tile of values widened to f32 (q8_0 caches), or a window of rows on the two-pass
    /// path.
    pub(super) vt: Vec<f32>,
    pub(super) kw: Vec<f32>,
    /// bf16 products: the block's queries, a key tile and a value tile in pairs, every
    /// query's tile of weights in pairs.
    pub(super) qb: Vec<u32>,
    pub(super) kp: Vec<u32>,
    pub(super) vp: Vec<u32>,
    pub(super) pb: Vec<u32>,
}

/// Query rows at consecutive positions `pos..pos + rows` for the `g` heads sharing one KV head:
/// row `r`'s heads are `q[r * q_stride..][..g * dim]`, and its output goes to the same place of
/// `out`. Row `p` attends to keys `first_key(p)..=p` (a sliding window, or from 0).
#[derive(Clone, Copy)]
pub struct RowBlock<'a> {
    pub q: &'a [f32],
    pub q_stride: usize,
    pub rows: usize,
    pub pos: usize,
    pub g: usize,
    pub window: Option<usize>,
}

impl RowBlock<'_> {
    pub(super) fn first_key(&self, p: usize) -> usize {
        match self.window {
            Some(w) => (p + 1).saturating_sub(w),
            None => 0,
        }
    }
}

/// Causal attention of a block of query rows over one KV head (see [`RowBlock`]); `out` has the
/// shape and stride of `blk.q`, only this group's columns of each row are written.
pub fn attend_rows(
    blk: &RowBlock<'_>,
    kv: TypedKv<'_>,
    how: Scoring<'_>,
    sc: &mut FlashScratch,
    out: &mut [f32],
) {
    let (d, g) = (kv.dim, blk.g);
    assert!(d > 0 && g > 0 && blk.rows > 0, "attend_rows: empty block");
    assert!(blk.q_stride >= g * d, "attend_rows: query stride");
    let span = (blk.rows - 1) * blk.q_stride + g * d;
    assert!(
        blk.q.len() >= span && out.len() >= span,
        "attend_rows: query rows"
    );
    assert!(kv.col + d <= kv.stride, "attend_rows: head columns");
    let end = blk.pos + blk.rows;
    assert!(
        kv.keys.len() >= kv.keys_needed(end) && kv.values.len() >= end * kv.stride,
        "attend_rows: cache rows"
    );
    assert!(
        kv.key_layout == RowLayout::Rows || !matches!(kv.keys, KvSlice::Q8_0(_)),
        "attend_rows: q8_0 keys are rows"
    );
    assert!(
        how.sinks.is_none_or(|s| s.len() == g),
        "attend_rows: one sink per head"
    );
    let blocks = |s: KvSlice<'_>| {
        !matches!(s, KvSlice::Q8_0(_)) || (kv.col | d | kv.stride).is_multiple_of(32)
    };
    assert!(
        blocks(kv.keys) && blocks(kv.values),
        "attend_rows: q8_0 rows split blocks"
    );
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 && d.is_multiple_of(16) {
        // SAFETY: AVX-512 F/DQ present (`Isa::Avx512`); shapes checked above.
        unsafe { flash::attend_rows(blk, kv, how, sc, out, blk.q_stride) };
        return;
    }
    match kv.f32() {
        Some(f) => two_pass(blk, f, how, sc, out),
        None => {
            // Widen the rows the block reads, then attend over the copy.
            let first = blk.first_key(blk.pos);
            let n = blk.pos + blk.rows - first;
            let (mut kw, mut vt) = (std::mem::take(&mut sc.kw), std::mem::take(&mut sc.vt));
            kw.resize(n * d, 0.0);
            vt.resize(n * d, 0.0);
            for j in 0..n {
                let at = (first + j) * kv.stride + kv.col;
                kv.read_key(first + j, &mut kw[j * d..(j + 1) * d]);
                kv.values.read(at, &mut vt[j * d..(j + 1) * d]);
            }
            let wide = HeadKv {
                keys: &kw,
                values: &vt,
                stride: d,
                col: 0,
                dim: d,
            };
            let shifted = RowBlock {
                pos: blk.pos - first,
                window: blk.window,
                ..*blk
            };
            // Positions shift by `first` (non-zero only with a window, whose start shifts too).
            two_pass(&shifted, wide, how, sc, out);
            (sc.kw, sc.vt) = (kw, vt);
        }
    }
}

/// [`attend_rows`] without the tiled kernel: each row on its own through `attend_group`.
fn two_pass(
    blk: &RowBlock<'_>,
    kv: HeadKv<'_>,
    how: Scoring<'_>,
    sc: &mut FlashScratch,
    out: &mut [f32],
) {
    let (d, g) = (kv.dim, blk.g);
    for r in 0..blk.rows {
        let p = blk.pos + r;
        let start = blk.first_key(p);
        let len = p + 1 - start;
        sc.s.resize(g * len, 0.0);
        let q = &blk.q[r * blk.q_stride..][..g * d];
        let o = &mut out[r * blk.q_stride..][..g * d];
        attend_group(q, kv, start, how, &mut sc.s[..g * len], o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnd_vec(seed: &mut u32, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((*seed >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0) * scale
            })
            .collect()
    }

    /// Each value rounded to bf16 (to nearest even), as f32.
    fn round_bf16(v: &[f32]) -> Vec<f32> {
        v.iter()
            .map(|x| {
                let b = x.to_bits();
                f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
            })
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Double-precision softmax attention of one query (the reference every path is held to).
    fn reference(
        q: &[f32],
        kv: HeadKv<'_>,
        keys: std::ops::Range<usize>,
        how: (f32, Option<f32>, Option<f32>),
    ) -> Vec<f64> {
        let (scale, cap, sink) = how;
        let d = kv.dim;
        let mut logits: Vec<f64> = keys
            .clone()
            .map(|j| {
                let k = &kv.keys[j * kv.stride + kv.col..][..d];
                let s = q
                    .iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * scale as f64;
                match cap {
                    Some(c) => c as f64 * (s / c as f64).tanh(),
                    None => s,
                }
            })
            .collect();
        let max = logits
            .iter()
            .cloned()
            .chain(sink.map(|s| s as f64))
            .fold(f64::NEG_INFINITY, f64::max);
        logits.iter_mut().for_each(|l| *l = (*l - max).exp());
        let z: f64 = logits.iter().sum::<f64>() + sink.map_or(0.0, |s| (s as f64 - max).exp());
        (0..d)
            .map(|c| {
                keys.clone()
                    .zip(&logits)
                    .map(|(j, p)| p / z * kv.values[j * kv.stride + kv.col + c] as f64)
                    .sum()
            })
            .collect()
    }

    /// Every path (tiled or two-pass, whatever this CPU runs) matches the f64 reference, with
    /// soft caps, sinks and windows, for head widths that are and are not multiples of 16.
    #[test]
    fn rows_match_reference() {
        let mut seed = 7u32;
        for (d, nkv, g) in [
            (64, 2, 7),
            (128, 1, 6),
            (80, 3, 2),
            (16, 1, 1),
            (256, 1, 4),
            (24, 2, 3),
        ] {
            let stride = nkv * d;
            let positions = 75;
            let keys = rnd_vec(&mut seed, positions * stride, 1.0);
            let values = rnd_vec(&mut seed, positions * stride, 3.0);
            let kv = HeadKv {
                keys: &keys,
                values: &values,
                stride,
                col: (nkv - 1) * d,
                dim: d,
            };
            let sinks = rnd_vec(&mut seed, g, 2.0);
            // With bf16 products the reference takes queries, keys and values rounded as the
            // kernel rounds them; the weights' rounding (2^-9 relative, of exp(s - running
            // max)) is what the looser bound allows for: up to 7e-3 seen here with values of
            // ±6, where a wrong pairing of operands is off by the values' scale.
            let (keys_bf, values_bf) = (round_bf16(&keys), round_bf16(&values));
            let kv_bf = HeadKv {
                keys: &keys_bf,
                values: &values_bf,
                ..kv
            };
            for (cap, sink, window, bf16) in [
                (None, false, None, false),
                (Some(5.0), false, None, false),
                (None, true, None, false),
                (None, false, Some(20), false),
                (None, false, None, true),
                (Some(5.0), true, Some(20), true),
            ] {
                // (The tiled kernel's: head widths a multiple of 16.)
                let rounded = bf16 && super::super::bf16_attention() && d % 16 == 0;
                let (pos, rows) = (positions - 30, 30);
                let q_stride = g * d + 5;
                let q = rnd_vec(&mut seed, rows * q_stride, 1.0);
                let blk = RowBlock {
                    q: &q,
                    q_stride,
                    rows,
                    pos,
                    g,
                    window,
                };
                let how = Scoring {
                    scale: 0.125,
                    softcap: cap,
                    sinks: sink.then_some(&sinks[..]),
                    bf16,
                };
                let mut out = vec![0f32; rows * q_stride];
                attend_rows(&blk, kv.into(), how, &mut FlashScratch::default(), &mut out);
                if rounded {
                    let mut f32s = vec![0f32; rows * q_stride];
                    let how = Scoring { bf16: false, ..how };
                    attend_rows(
                        &blk,
                        kv.into(),
                        how,
                        &mut FlashScratch::default(),
                        &mut f32s,
                    );
                    assert_ne!(bits(&out), bits(&f32s), "d {d}: bf16 products taken");
                }
                let (kv_ref, tol) = if rounded { (kv_bf, 1.5e-2) } else { (kv, 2e-5) };
                for r in 0..rows {
                    let p = pos + r;
                    for h in 0..g {
                        let qh = &q[r * q_stride + h * d..][..d];
                        let qh = if rounded { round_bf16(qh) } else { qh.to_vec() };
                        let want = reference(
                            &qh,
                            kv_ref,
                            blk.first_key(p)..p + 1,
                            (0.125, cap, sink.then(|| sinks[h])),
                        );
                        for (c, w) in want.iter().enumerate() {
                            let got = out[r * q_stride + h * d + c] as f64;
                            assert!(
                                (got - w).abs() < tol * (1.0 + w.abs()),
                                "d {d} g {g} bf16 {rounded} row {r} head {h} col {c}: {got} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A block of rows equals each row computed alone, and any other split of the block, bit for
    /// bit (the batch invariance speculation and continuous batching rely on).
    #[test]
    fn block_equals_rows_alone() {
        let mut seed = 11u32;
        for (d, g, window) in [
            (64, 7, None),
            (128, 6, None),
            (64, 2, Some(33)),
            (80, 3, None),
        ] {
            let positions = 150;
            let keys = rnd_vec(&mut seed, positions * d, 1.0);
            let values = rnd_vec(&mut seed, positions * d, 1.0);
            let kv = HeadKv {
                keys: &keys,
                values: &values,
                stride: d,
                col: 0,
                dim: d,
            };
            let q = rnd_vec(&mut seed, positions * g * d, 1.0);
            for bf16 in [false, true] {
                let how = Scoring {
                    bf16,
                    ..Scoring::scaled(0.1)
                };
                let run = |from: usize, rows: usize, out: &mut [f32]| {
                    let blk = RowBlock {
                        q: &q[from * g * d..],
                        q_stride: g * d,
                        rows,
                        pos: from,
                        g,
                        window,
                    };
                    attend_rows(
                        &blk,
                        kv.into(),
                        how,
                        &mut FlashScratch::default(),
                        &mut out[from * g * d..],
                    );
                };
                let mut whole = vec![0f32; positions * g * d];
                run(0, positions, &mut whole);
                let mut single = vec![0f32; positions * g * d];
                for p in 0..positions {
                    run(p, 1, &mut single);
                }
                assert_eq!(
                    bits(&whole),
                    bits(&single),
                    "d {d} g {g} bf16 {bf16}: block vs single rows"
                );
                let mut split = vec![0f32; positions * g * d];
                let mut from = 0;
                for len in [1, 17, 5, 40, 3].iter().cycle() {
                    let len = (*len).min(positions - from);
                    run(from, len, &mut split);
                    from += len;
                    if from == positions {
                        break;
                    }
                }
                assert_eq!(
                    bits(&whole),
                    bits(&split),
                    "d {d} g {g} bf16 {bf16}: block vs other splits"
                );
            }
        }
    }

    /// f16, bf16 and q8_0 caches, and keys laid out in tiles, give exactly what attention gives
    /// over the same rows widened to f32 (the tile loaders widen as `KvSlice::read` does; bf16
    /// products round the widened values, which bf16 rows multiplied as stored must equal), on
    /// any path; a cache cut back and refilled (stale lanes in a tile) too.
    #[test]
    fn typed_cache_equals_widened_rows() {
        use crate::cache::{CacheFormat, KvCache, KvType};
        let mut seed = 5u32;
        let (nkv, d, g, positions) = (2, 64, 3, 70);
        let layouts = [RowLayout::Rows, RowLayout::Tiles];
        for (ty, layout) in [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0]
            .into_iter()
            .flat_map(|t| layouts.map(|l| (t, l)))
            .filter(|&(t, l)| l == RowLayout::Rows || t.tileable())
        {
            let mut c = KvCache::new(nkv, d);
            c.set_format(CacheFormat::uniform(ty), layout)
                .expect("empty cache");
            let mut fill = |c: &mut KvCache, n: usize| {
                for _ in 0..n {
                    let k = rnd_vec(&mut seed, nkv * d, 1.0);
                    let v = rnd_vec(&mut seed, nkv * d, 2.0);
                    c.append(&k, &v);
                }
            };
            fill(&mut c, positions);
            c.truncate(positions - 13);
            fill(&mut c, 13);
            let (kv_k, kv_v) = (c.keys_view(), c.values_view());
            let mut wk = vec![0f32; positions * nkv * d];
            let mut wv = vec![0f32; positions * nkv * d];
            for (p, row) in wk.chunks_exact_mut(nkv * d).enumerate() {
                c.read_key(p, row);
            }
            kv_v.read(0, &mut wv);
            let q = rnd_vec(&mut seed, positions * g * d, 1.0);
            for window in [None, Some(21)] {
                let blk = RowBlock {
                    q: &q,
                    q_stride: g * d,
                    rows: positions,
                    pos: 0,
                    g,
                    window,
                };
                let typed = TypedKv {
                    keys: kv_k,
                    key_layout: c.key_layout(),
                    values: kv_v,
                    stride: nkv * d,
                    col: d,
                    dim: d,
                };
                let wide = HeadKv {
                    keys: &wk,
                    values: &wv,
                    stride: nkv * d,
                    col: d,
                    dim: d,
                };
                for bf16 in [false, true] {
                    let how = Scoring {
                        bf16,
                        ..Scoring::scaled(0.125)
                    };
                    let mut a = vec![0f32; q.len()];
                    let mut b = vec![0f32; q.len()];
                    attend_rows(&blk, typed, how, &mut FlashScratch::default(), &mut a);
                    attend_rows(&blk, wide.into(), how, &mut FlashScratch::default(), &mut b);
                    assert_eq!(
                        bits(&a),
                        bits(&b),
                        "{ty:?} {layout:?} window {window:?} bf16 {bf16}"
                    );
                    // Rows one at a time (the decode path) give the same bits.
                    let mut one = vec![0f32; q.len()];
                    for p in 0..positions {
                        let blk1 = RowBlock {
                            q: &q[p * g * d..],
                            rows: 1,
                            pos: p,
                            ..blk
                        };
                        attend_rows(
                            &blk1,
                            typed,
                            how,
                            &mut FlashScratch::default(),
                            &mut one[p * g * d..],
                        );
                    }
                    let what =
                        format!("{ty:?} {layout:?} window {window:?} bf16 {bf16}: rows alone");
                    assert_eq!(bits(&a), bits(&one), "{what}");
                }
            }
        }
    }
}
