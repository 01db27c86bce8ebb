//! Scalar reference dequantization (ggml-quants.c `dequantize_row_*`). The float operations and
//! their order match gguf-py's `gguf.quants.dequantize` exactly, so results are bit-identical
//! (checked against digests of the real models in ferrox-models/tests/dequant_digests.rs).

use super::blocks::*;

pub trait Dequantize: Block {
    /// Writes the block's `QK` values to `out[..QK]`.
    fn dequantize(&self, out: &mut [f32]);
}

impl Dequantize for BlockQ4_0 {
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * ((q & 0x0F) as i32 - 8) as f32;
            out[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

impl Dequantize for BlockQ4_1 {
    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * (q & 0x0F) as f32 + m;
            out[j + 16] = d * (q >> 4) as f32 + m;
        }
    }
}

/// The 32 unsigned quants of a Q5_0 / Q5_1 block (subtract 16 for Q5_0's signed value).
#[inline]
pub(super) fn q5_values(qh: [u8; 4], qs: &[u8; 16]) -> [u8; 32] {
    let h = u32::from_le_bytes(qh);
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0x0F) | ((((h >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((h >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

impl Dequantize for BlockQ5_0 {
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (o, q) in out.iter_mut().zip(q5_values(self.qh, &self.qs)) {
            *o = d * (q as i32 - 16) as f32;
        }
    }
}

impl Dequantize for BlockQ5_1 {
    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        for (o, q) in out.iter_mut().zip(q5_values(self.qh, &self.qs)) {
            *o = d * q as f32 + m;
        }
    }
}

/// Q8_0 and Q8_1 (whose sum term dequantization ignores): `q·d`.
fn dequantize_q8(d: [u8; 2], qs: &[i8; 32], out: &mut [f32]) {
    let d = f16_to_f32(d);
    for (o, &q) in out.iter_mut().zip(qs) {
        *o = q as f32 * d;
    }
}

impl Dequantize for BlockQ8_0 {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_q8(self.d, &self.qs, out);
    }
}

impl Dequantize for BlockQ8_1 {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_q8(self.d, &self.qs, out);
    }
}

impl Dequantize for BlockQ2K {
    fn dequantize(&self, out: &mut [f32]) {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        for (e, o) in out[..QK_K].iter_mut().enumerate() {
            let (c, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let q = (self.qs[32 * c + l] >> (2 * j)) & 3;
            let sc = self.scales[e / 16];
            let dl = d * (sc & 0x0F) as f32;
            let ml = dmin * (sc >> 4) as f32;
            *o = dl * q as f32 - ml;
        }
    }
}

impl Dequantize for BlockQ3K {
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        let scales = q3k_scales(&self.scales);
        for (e, o) in out[..QK_K].iter_mut().enumerate() {
            let (c, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let low = ((self.qs[32 * c + l] >> (2 * j)) & 3) as i32;
            let high = (self.hmask[l] >> (e / 32)) & 1;
            let q = low - if high == 0 { 4 } else { 0 };
            *o = (d * scales[e / 16] as f32) * q as f32;
        }
    }
}

/// The 256 unsigned quants of a Q4_K or Q5_K block: element `l` of 32-element sub-block
/// `sub` is its nibble of `qs` plus `high(sub, l) << 4` (Q5_K's fifth bit; 0 for Q4_K).
#[inline(always)]
pub(super) fn k4_values(qs: &[u8; 128], high: impl Fn(usize, usize) -> u8) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (e, v) in q.iter_mut().enumerate() {
        let (sub, l) = (e / 32, e % 32);
        *v = ((qs[32 * (sub / 2) + l] >> (4 * (sub % 2))) & 0x0F) | (high(sub, l) << 4);
    }
    q
}

/// Q4_K and Q5_K: sub-block `sub` of 32 has scale `d·sc` and min `dmin·m`.
#[inline(always)]
fn dequantize_k4([d, dmin]: [[u8; 2]; 2], scales: &[u8; 12], q: [u8; QK_K], out: &mut [f32]) {
    let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
    for sub in 0..8 {
        let (sc, m) = scale_min_k4(sub, scales);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        for (o, &q) in out[32 * sub..32 * sub + 32].iter_mut().zip(&q[32 * sub..]) {
            *o = d1 * q as f32 - m1;
        }
    }
}

impl Dequantize for BlockQ4K {
    fn dequantize(&self, out: &mut [f32]) {
        let q = k4_values(&self.qs, |_, _| 0);
        dequantize_k4([self.d, self.dmin], &self.scales, q, out);
    }
}

impl Dequantize for BlockQ5K {
    fn dequantize(&self, out: &mut [f32]) {
        let q = k4_values(&self.qs, |sub, l| (self.qh[l] >> sub) & 1);
        dequantize_k4([self.d, self.dmin], &self.scales, q, out);
    }
}

/// The 256 unsigned 6-bit quants of a Q6_K block (subtract 32 for the signed value).
#[inline]
pub fn q6k_values(b: &BlockQ6K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (e, v) in q.iter_mut().enumerate() {
        let (c, r) = (e / 128, e % 128);
        let low = (b.ql[64 * c + r % 64] >> (4 * (r / 64))) & 0x0F;
        let high = (b.qh[32 * c + r % 32] >> (2 * (r / 32))) & 3;
        *v = low | (high << 4);
    }
    q
}

impl Dequantize for BlockQ6K {
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (e, q) in q6k_values(self).into_iter().enumerate() {
            out[e] = (d * self.scales[e / 16] as f32) * (q as i32 - 32) as f32;
        }
    }
}

/// 32 codebook values from 16 bytes of nibbles (low nibbles are elements 0..16), times `d`.
#[inline]
fn dequantize_lut(d: f32, lut: &[i8; 16], qs: &[u8], out: &mut [f32]) {
    for (j, &q) in qs.iter().enumerate() {
        out[j] = d * lut[(q & 0x0F) as usize] as f32;
        out[j + 16] = d * lut[(q >> 4) as usize] as f32;
    }
}

impl Dequantize for BlockIQ4NL {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_lut(f16_to_f32(self.d), &IQ4NL_VALUES, &self.qs, out);
    }
}

impl Dequantize for BlockIQ4XS {
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (ib, ls) in iq4xs_scales(self).into_iter().enumerate() {
            let qs = &self.qs[16 * ib..16 * ib + 16];
            dequantize_lut(d * ls as f32, &IQ4NL_VALUES, qs, &mut out[32 * ib..]);
        }
    }
}

impl Dequantize for BlockMXFP4 {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_lut(e8m0_to_f32_half(self.e), &MXFP4_VALUES, &self.qs, out);
    }
}

impl BlockQ8K {
    pub fn dequantize(&self, out: &mut [f32]) {
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = self.d * q as f32;
        }
    }

    /// Reads a block from its 292 little-endian bytes (any alignment).
    pub fn from_bytes(b: &[u8]) -> BlockQ8K {
        let mut blk = BlockQ8K {
            d: f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            ..Default::default()
        };
        for (q, &v) in blk.qs.iter_mut().zip(&b[4..4 + QK_K]) {
            *q = v as i8;
        }
        for (i, s) in blk.bsums.iter_mut().enumerate() {
            let o = 4 + QK_K + 2 * i;
            *s = i16::from_le_bytes([b[o], b[o + 1]]);
        }
        blk
    }
}

pub(super) fn dequantize_blocks<B: Dequantize>(bytes: &[u8], out: &mut [f32]) {
    let blocks = as_blocks::<B>(bytes).expect("row length checked by caller");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(B::QK)) {
        b.dequantize(o);
    }
}
