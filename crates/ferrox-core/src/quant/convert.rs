//! Load-time layouts that trade bytes for decode work on the grid types whose decode is the
//! cost of a product (`bench_matmul`: IQ1_S / IQ1_M at ~4.5 GB/s against ~18 for Q4_K):
//!
//! - IQ1_S / IQ1_M become [`BlockIQ1T`]: the grid values (−1, 0, 1) as 2-bit codes in
//!   TQ2_0's arrangement, each group of 8's shift sign as a bit, the scales as nibbles and the
//!   float factor `d/8` as f32 — 80 bytes per 256 weights (2.5 bits) instead of 50 / 56, and
//!   no grid lookups left to decode. The weights a kernel builds from it (`8·g ± 1` times the
//!   same odd scales and factor) are the ones it builds from the original block, so products
//!   are bit-identical (tested against the IQ1 decoders).
//! - TQ1_0 becomes TQ2_0: the same ternary values and scale, two bits each instead of base-3
//!   digits (66 bytes instead of 54), which both kernels sum identically.
//! - IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS / IQ3_S become [`BlockIQN`]: each weight a nibble, the
//!   index of its magnitude among the type's few grid values (IQ2: 8, 25, 43; IQ3: 8 each)
//!   and its sign, plus the odd scale per 16 and the f16 `d` — 146 bytes per 256 (4.6 bits,
//!   instead of 2.1–3.4): a decode is a `vpshufb` and a mask, like IQ4_NL's.
//!
//! The IQ1 definitions are ggml-quants.c's `dequantize_row_iq1_s` / `_iq1_m` (see `iq.rs`).

use super::blocks::*;
use super::iq::{dequantize_half_step, dequantize_int_scale, Decode, Decoded};
use super::GgmlType;

/// Bytes of one [`BlockIQ1T`].
pub const IQ1T_BYTES: usize = 80;

block!(
    /// IQ1_S / IQ1_M in the load-time ternary layout: weight `128m + 32n + l` is
    /// `((qs[32m + l] >> 2n) & 3) − 1` (TQ2_0's order) shifted by ±1/8 — `−` where bit `k` of
    /// `minus` (LE u32) is set for group `k = e / 8` — times the odd scale `2s + 1` of nibble
    /// `e / 16` of `scales` (low nibble first) and the factor `f` (LE f32 = d/8).
    BlockIQ1T, QK_K, IQ1T_BYTES,
    { qs: [u8; 64], minus: [u8; 4], scales: [u8; 8], f: [u8; 4] });

/// Views whole [`BlockIQ1T`]s in `bytes`; `None` when the length is not a whole number.
pub fn as_iq1t(bytes: &[u8]) -> Option<&[BlockIQ1T]> {
    as_blocks(bytes)
}

/// What a matrix of type `ty` is converted to at load, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// IQ1_S / IQ1_M rows become [`BlockIQ1T`] rows (the matrix keeps its type).
    Iq1Ternary,
    /// IQ2 / IQ3 rows become [`BlockIQN`] rows (the matrix keeps its type).
    IqNibbles,
    /// TQ1_0 rows become TQ2_0 rows (the matrix becomes TQ2_0).
    Tq1ToTq2,
}

impl Conversion {
    pub fn of(ty: GgmlType) -> Option<Conversion> {
        match ty {
            GgmlType::IQ1S | GgmlType::IQ1M => Some(Conversion::Iq1Ternary),
            GgmlType::TQ1_0 => Some(Conversion::Tq1ToTq2),
            GgmlType::IQ2XXS
            | GgmlType::IQ2XS
            | GgmlType::IQ2S
            | GgmlType::IQ3XXS
            | GgmlType::IQ3S => Some(Conversion::IqNibbles),
            _ => None,
        }
    }

    /// The type and the bytes per row of a converted matrix of `cols` columns.
    pub fn target(self, ty: GgmlType, cols: usize) -> (GgmlType, usize) {
        match self {
            Conversion::Iq1Ternary => (ty, cols / QK_K * IQ1T_BYTES),
            Conversion::Tq1ToTq2 => (GgmlType::TQ2_0, cols / QK_K * 66),
            Conversion::IqNibbles => (ty, cols / QK_K * IQN_BYTES),
        }
    }
}

/// Converts whole rows of `ty` in `src` into `dst` (sized by [`Conversion::target`]).
pub fn convert(ty: GgmlType, src: &[u8], dst: &mut [u8]) {
    match ty {
        GgmlType::IQ1S => each::<BlockIQ1S, IQ1T_BYTES>(src, dst, |b, out| {
            iq1t(&b.decode(), &b.deltas(), f16_to_f32(b.d), out)
        }),
        GgmlType::IQ1M => each::<BlockIQ1M, IQ1T_BYTES>(src, dst, |b, out| {
            iq1t(&b.decode(), &b.deltas(), f16_to_f32(b.d()), out)
        }),
        GgmlType::TQ1_0 => each::<BlockTQ1_0, 66>(src, dst, |b, out| {
            out[..64].copy_from_slice(&tq2_codes(&b.decode()));
            out[64..].copy_from_slice(&b.d);
        }),
        GgmlType::IQ2XXS => each::<BlockIQ2XXS, IQN_BYTES>(src, dst, |b, o| iqn(ty, b, b.d, o)),
        GgmlType::IQ2XS => each::<BlockIQ2XS, IQN_BYTES>(src, dst, |b, o| iqn(ty, b, b.d, o)),
        GgmlType::IQ2S => each::<BlockIQ2S, IQN_BYTES>(src, dst, |b, o| iqn(ty, b, b.d, o)),
        GgmlType::IQ3XXS => each::<BlockIQ3XXS, IQN_BYTES>(src, dst, |b, o| iqn(ty, b, b.d, o)),
        GgmlType::IQ3S => each::<BlockIQ3S, IQN_BYTES>(src, dst, |b, o| iqn(ty, b, b.d, o)),
        other => unreachable!("no load-time conversion for {other:?}"),
    }
}

/// Bytes of one [`BlockIQN`].
pub const IQN_BYTES: usize = 146;

block!(
    /// An IQ2 / IQ3 super-block as nibbles: weight `128m + 64h + l` is nibble `h` (low first)
    /// of `nib[64m + l]`: bits 0–2 index [`magnitudes`] of the type, bit 3 is the sign; `ls`
    /// holds the odd scale of each 16 weights, `d` the block's f16.
    BlockIQN, QK_K, IQN_BYTES, { nib: [u8; 128], ls: [u8; 16], d: [u8; 2] });

/// Views whole [`BlockIQN`]s in `bytes`; `None` when the length is not a whole number.
pub fn as_iqn(bytes: &[u8]) -> Option<&[BlockIQN]> {
    as_blocks(bytes)
}

/// The grid magnitudes of an IQ2 / IQ3 type in nibble-index order: ggml's `iq2*_grid`
/// bytes are 8, 25, 43, `iq3xxs_grid`'s 4, 12, … 62, `iq3s_grid`'s 1, 3, … 15.
pub fn magnitudes(ty: GgmlType) -> [u8; 8] {
    match ty {
        GgmlType::IQ3XXS => [4, 12, 20, 28, 36, 44, 52, 62],
        GgmlType::IQ3S => [1, 3, 5, 7, 9, 11, 13, 15],
        _ => [8, 25, 43, 0, 0, 0, 0, 0],
    }
}

fn iqn(ty: GgmlType, b: &impl Decode, d: [u8; 2], out: &mut [u8]) {
    let dec = b.decode();
    let mags = magnitudes(ty);
    let mut nib = [0u8; 128];
    for (e, &v) in dec.v.iter().enumerate() {
        let mag = v.unsigned_abs();
        // The grids hold only these magnitudes (tested), whatever the file's bits.
        let idx = mags.iter().position(|&m| m == mag).unwrap_or(0) as u8;
        let code = idx | (u8::from(v < 0) << 3);
        let (m, h, l) = (e / 128, (e / 64) % 2, e % 64);
        nib[64 * m + l] |= code << (4 * h);
    }
    out[..128].copy_from_slice(&nib);
    for (o, &ls) in out[128..144].iter_mut().zip(&dec.ls) {
        *o = ls as u8;
    }
    out[144..146].copy_from_slice(&d);
}

impl BlockIQN {
    /// The weights and scales as the type's decoder gives them.
    fn decoded(&self, ty: GgmlType) -> Decoded {
        let mags = magnitudes(ty);
        let mut o = Decoded::default();
        for (e, v) in o.v.iter_mut().enumerate() {
            let (m, h, l) = (e / 128, (e / 64) % 2, e % 64);
            let code = (self.nib[64 * m + l] >> (4 * h)) & 15;
            let mag = mags[(code & 7) as usize] as i8;
            *v = if code & 8 != 0 { -mag } else { mag };
        }
        for (o, &ls) in o.ls.iter_mut().zip(&self.ls) {
            *o = ls as i32;
        }
        o
    }
}

/// Dequantizes a row of [`BlockIQN`]s of `ty` with the type's own reference formula.
pub fn dequantize_iqn_row(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    let blocks = as_iqn(src).expect("whole blocks");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let dec = b.decoded(ty);
        match ty {
            GgmlType::IQ3S => dequantize_int_scale(f16_to_f32(b.d), &dec, o),
            GgmlType::IQ3XXS => dequantize_half_step(b.d, 0.5, &dec, o),
            _ => dequantize_half_step(b.d, 0.25, &dec, o),
        }
    }
}

fn each<B: Block, const OUT: usize>(src: &[u8], dst: &mut [u8], f: impl Fn(&B, &mut [u8])) {
    let blocks = as_blocks::<B>(src).expect("whole blocks");
    assert_eq!(dst.len(), blocks.len() * OUT, "converted size");
    for (b, out) in blocks.iter().zip(dst.chunks_exact_mut(OUT)) {
        f(b, out);
    }
}

/// Ternary values `v` (−1, 0, 1) as 2-bit `v + 1` in TQ2_0's order.
fn tq2_codes(dec: &Decoded) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for (e, &v) in dec.v.iter().enumerate() {
        debug_assert!((-1..=1).contains(&v));
        let (m, n, l) = (e / 128, (e / 32) % 4, e % 32);
        qs[32 * m + l] |= ((v + 1) as u8) << (2 * n);
    }
    qs
}

fn iq1t(dec: &Decoded, deltas: &[i32; 32], d: f32, out: &mut [u8]) {
    let minus = deltas
        .iter()
        .enumerate()
        .fold(0u32, |m, (g, &s)| m | (u32::from(s < 0) << g));
    let mut scales = [0u8; 8];
    for (k, &ls) in dec.ls.iter().enumerate() {
        scales[k / 2] |= (((ls - 1) / 2) as u8) << (4 * (k % 2));
    }
    out[..64].copy_from_slice(&tq2_codes(dec));
    out[64..68].copy_from_slice(&minus.to_le_bytes());
    out[68..76].copy_from_slice(&scales);
    // d/8 is exact (a power of two), and what the kernels multiply by.
    out[76..80].copy_from_slice(&(d * 0.125).to_le_bytes());
}

impl BlockIQ1T {
    /// Weight `e` as `8·g ± 1` (the grid value times 8 plus its group's shift).
    pub fn weight(&self, e: usize) -> i32 {
        let (m, n, l) = (e / 128, (e / 32) % 4, e % 32);
        let g = ((self.qs[32 * m + l] >> (2 * n)) & 3) as i32 - 1;
        let minus = (u32::from_le_bytes(self.minus) >> (e / 8)) & 1 == 1;
        8 * g + if minus { -1 } else { 1 }
    }

    /// The odd scale `2s + 1` of weights `16k .. 16k + 16`.
    pub fn scale(&self, k: usize) -> i32 {
        2 * ((self.scales[k / 2] >> (4 * (k % 2))) & 15) as i32 + 1
    }

    /// The block's weights: `(f·ls)·(8g ± 1)`, which equals the IQ1 reference's
    /// `(d·ls)·(g ± 1/8)` bit for bit (both are one rounding of the same product: f = d/8
    /// and 8g ± 1 = 8·(g ± 1/8) exactly).
    pub fn dequantize(&self, out: &mut [f32]) {
        let f = f32::from_le_bytes(self.f);
        for (e, o) in out[..QK_K].iter_mut().enumerate() {
            *o = (f * self.scale(e / 16) as f32) * self.weight(e) as f32;
        }
    }
}

/// Dequantizes a row of [`BlockIQ1T`]s.
pub fn dequantize_iq1t_row(src: &[u8], out: &mut [f32]) {
    let blocks = as_iq1t(src).expect("whole blocks");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        b.dequantize(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize_row;
    use rand::{Rng, SeedableRng};

    fn random_row(ty: GgmlType, blocks: usize, seed: u64) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes: Vec<u8> = (0..blocks * ty.type_size()).map(|_| rng.gen()).collect();
        // A finite, moderate f16 scale in each block (random bits may be NaN or huge).
        for b in bytes.chunks_exact_mut(ty.type_size()) {
            let d = f32_to_f16(rng.gen_range(1e-4f32..1.0));
            match ty {
                GgmlType::IQ1M => {
                    // The f16 lives in the top nibbles of the four scale words.
                    let u = u16::from_le_bytes(d);
                    for (i, w) in b[48..56].chunks_exact_mut(2).enumerate() {
                        let v = u16::from_le_bytes([w[0], w[1]]) & 0x0FFF;
                        let v = v | (((u >> (4 * i)) & 15) << 12);
                        w.copy_from_slice(&v.to_le_bytes());
                    }
                }
                GgmlType::TQ1_0 => {
                    // Base-3 bytes stay below 243 in llama-quantize's output.
                    for q in &mut b[..52] {
                        *q = rng.gen_range(0..243);
                    }
                    b[52..54].copy_from_slice(&d);
                }
                _ => b[..2].copy_from_slice(&d),
            }
        }
        bytes
    }

    /// Every byte of every grid entry is one of its type's nibble magnitudes, so the
    /// conversion is exact for any file.
    #[test]
    fn grids_hold_only_the_nibble_magnitudes() {
        use crate::quant::iq_grids::*;
        let check = |ty: GgmlType, bytes: Vec<u8>| {
            let mags = magnitudes(ty);
            assert!(bytes.iter().all(|b| mags.contains(b) && *b != 0), "{ty:?}");
        };
        let b64 = |g: &[u64]| g.iter().flat_map(|e| e.to_le_bytes()).collect::<Vec<_>>();
        let b32 = |g: &[u32]| g.iter().flat_map(|e| e.to_le_bytes()).collect::<Vec<_>>();
        check(GgmlType::IQ2XXS, b64(&IQ2XXS_GRID));
        check(GgmlType::IQ2XS, b64(&IQ2XS_GRID));
        check(GgmlType::IQ2S, b64(&IQ2S_GRID));
        check(GgmlType::IQ3XXS, b32(&IQ3XXS_GRID));
        check(GgmlType::IQ3S, b32(&IQ3S_GRID));
    }

    #[test]
    fn conversions_dequantize_to_the_original_bit_for_bit() {
        for ty in [
            GgmlType::IQ1S,
            GgmlType::IQ1M,
            GgmlType::TQ1_0,
            GgmlType::IQ2XXS,
            GgmlType::IQ2XS,
            GgmlType::IQ2S,
            GgmlType::IQ3XXS,
            GgmlType::IQ3S,
        ] {
            let conv = Conversion::of(ty).unwrap();
            let cols = 4 * QK_K;
            let src = random_row(ty, 4, ty as u64);
            let (to, row_bytes) = conv.target(ty, cols);
            let mut dst = vec![0u8; row_bytes];
            convert(ty, &src, &mut dst);
            let (mut want, mut got) = (vec![0f32; cols], vec![0f32; cols]);
            dequantize_row(ty, &src, &mut want).unwrap();
            match conv {
                Conversion::Iq1Ternary => dequantize_iq1t_row(&dst, &mut got),
                Conversion::IqNibbles => dequantize_iqn_row(ty, &dst, &mut got),
                Conversion::Tq1ToTq2 => dequantize_row(to, &dst, &mut got).unwrap(),
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{ty:?}");
            assert!(want.iter().any(|&x| x != 0.0));
        }
    }
}
