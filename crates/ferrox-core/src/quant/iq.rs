//! IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0 and TQ2_0: decoding into signed
//! integer weights, scalar reference dequantization (ggml-quants.c `dequantize_row_*`; the
//! float operations and their order are gguf-py `quants.py`'s, so results are bit-identical)
//! and dot products against Q8_K (ggml-cpu/quants.c `ggml_vec_dot_*_q8_K_generic`).
//!
//! Every type decodes to 256 signed weights and an integer scale per 16 of them; a block's
//! dot product is then one exact integer `Σ scale · Σ w·y` (the reference's `bsum`), and only
//! the float factor around it differs between types.

use super::blocks::*;
use super::dequant::Dequantize;
use super::iq_grids::*;

/// Shift of the IQ1 grids (`IQ1S_DELTA`, `IQ1M_DELTA`).
pub const IQ1_DELTA: f32 = 0.125;

/// One super-block as integers: `v` the signed weights, `ls` the scale of each 16.
pub struct Decoded {
    pub v: [i8; QK_K],
    pub ls: [i32; 16],
}

impl Default for Decoded {
    fn default() -> Self {
        Decoded {
            v: [0; QK_K],
            ls: [0; 16],
        }
    }
}

/// The 8 bytes of a grid entry with sign bit `j` of `signs` negating byte `j`.
#[inline]
fn signed8(grid: u64, signs: u8, out: &mut [i8]) {
    for (j, (o, g)) in out.iter_mut().zip(grid.to_le_bytes()).enumerate() {
        *o = if (signs >> j) & 1 == 1 {
            -(g as i8)
        } else {
            g as i8
        };
    }
}

/// `signed8` for a u32 grid entry (4 elements) with sign bits `shift..shift + 4`.
#[inline]
fn signed4(grid: u32, signs: u8, shift: usize, out: &mut [i8]) {
    for (j, (o, g)) in out.iter_mut().zip(grid.to_le_bytes()).enumerate() {
        *o = if (signs >> (shift + j)) & 1 == 1 {
            -(g as i8)
        } else {
            g as i8
        };
    }
}

#[inline]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// Types whose weights decode to `Decoded` (scales and shifts aside).
pub trait Decode {
    fn decode(&self) -> Decoded;
}

impl Decode for BlockIQ2XXS {
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for ib in 0..8 {
            let (idx, sg) = (u32_at(&self.qs, 8 * ib), u32_at(&self.qs, 8 * ib + 4));
            o.ls[2 * ib..2 * ib + 2].fill(2 * (sg >> 28) as i32 + 1);
            for (l, &g) in idx.to_le_bytes().iter().enumerate() {
                let signs = KSIGNS_IQ2XS[((sg >> (7 * l)) & 127) as usize];
                let e = 32 * ib + 8 * l;
                signed8(IQ2XXS_GRID[g as usize], signs, &mut o.v[e..e + 8]);
            }
        }
        o
    }
}

impl Decode for BlockIQ2XS {
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for (k, ls) in o.ls.iter_mut().enumerate() {
            *ls = 2 * ((self.scales[k / 2] >> (4 * (k % 2))) & 0x0F) as i32 + 1;
        }
        for g in 0..32 {
            let q = u16_at(&self.qs, 2 * g);
            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
            signed8(
                IQ2XS_GRID[(q & 511) as usize],
                signs,
                &mut o.v[8 * g..8 * g + 8],
            );
        }
        o
    }
}

impl Decode for BlockIQ2S {
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for (k, ls) in o.ls.iter_mut().enumerate() {
            *ls = 2 * ((self.scales[k / 2] >> (4 * (k % 2))) & 0x0F) as i32 + 1;
        }
        for g in 0..32 {
            let hi = ((self.qh[g / 4] >> (2 * (g % 4))) & 3) as usize;
            let idx = self.qs[g] as usize | (hi << 8);
            signed8(IQ2S_GRID[idx], self.qs[32 + g], &mut o.v[8 * g..8 * g + 8]);
        }
        o
    }
}

impl Decode for BlockIQ3XXS {
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for ib in 0..8 {
            let sg = u32_at(&self.qs, 64 + 4 * ib);
            o.ls[2 * ib..2 * ib + 2].fill(2 * (sg >> 28) as i32 + 1);
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((sg >> (7 * l)) & 127) as usize];
                let (e, q) = (32 * ib + 8 * l, 8 * ib + 2 * l);
                let (a, b) = (self.qs[q] as usize, self.qs[q + 1] as usize);
                signed4(IQ3XXS_GRID[a], signs, 0, &mut o.v[e..e + 4]);
                signed4(IQ3XXS_GRID[b], signs, 4, &mut o.v[e + 4..e + 8]);
            }
        }
        o
    }
}

impl Decode for BlockIQ3S {
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for (k, ls) in o.ls.iter_mut().enumerate() {
            *ls = 2 * ((self.scales[k / 4] >> (4 * ((k / 2) % 2))) & 0x0F) as i32 + 1;
        }
        for q in 0..64 {
            let idx = self.qs[q] as usize | ((((self.qh[q / 8] >> (q % 8)) & 1) as usize) << 8);
            let signs = self.signs[q / 2];
            signed4(
                IQ3S_GRID[idx],
                signs,
                4 * (q % 2),
                &mut o.v[4 * q..4 * q + 4],
            );
        }
        o
    }
}

/// Grid entry `idx` of `IQ1S_GRID` (values −1, 0, 1).
#[inline]
fn iq1_grid(idx: usize, out: &mut [i8]) {
    for (o, g) in out.iter_mut().zip(IQ1S_GRID[idx].to_le_bytes()) {
        *o = g as i8;
    }
}

impl Decode for BlockIQ1S {
    /// The grid values (the ±1/8 shifts are [`BlockIQ1S::deltas`]).
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for ib in 0..8 {
            let qh = u16_at(&self.qh, 2 * ib);
            o.ls[2 * ib..2 * ib + 2].fill(2 * ((qh >> 12) & 7) as i32 + 1);
            for l in 0..4 {
                let idx = self.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                let e = 32 * ib + 8 * l;
                iq1_grid(idx, &mut o.v[e..e + 8]);
            }
        }
        o
    }
}

impl BlockIQ1S {
    /// The shift sign (±1) of each group of 8.
    pub fn deltas(&self) -> [i32; 32] {
        std::array::from_fn(|g| {
            if u16_at(&self.qh, 2 * (g / 4)) & 0x8000 != 0 {
                -1
            } else {
                1
            }
        })
    }
}

impl Decode for BlockIQ1M {
    /// The grid values (the ±1/8 shifts are [`BlockIQ1M::deltas`]).
    fn decode(&self) -> Decoded {
        let mut o = Decoded::default();
        for (k, ls) in o.ls.iter_mut().enumerate() {
            let sc = u16_at(&self.scales, 2 * (k / 4));
            *ls = 2 * ((sc >> (3 * (k % 4))) & 7) as i32 + 1;
        }
        for g in 0..32 {
            let hi = (self.qh[g / 2] >> (4 * (g % 2))) & 7;
            iq1_grid(
                self.qs[g] as usize | ((hi as usize) << 8),
                &mut o.v[8 * g..8 * g + 8],
            );
        }
        o
    }
}

impl BlockIQ1M {
    /// The shift sign (±1) of each group of 8.
    pub fn deltas(&self) -> [i32; 32] {
        std::array::from_fn(|g| {
            if (self.qh[g / 2] >> (4 * (g % 2))) & 8 != 0 {
                -1
            } else {
                1
            }
        })
    }

    /// The f16 super-scale, stored in the top nibble of each of the four u16 scale words.
    pub fn d(&self) -> [u8; 2] {
        let s = |i: usize| u16_at(&self.scales, 2 * i);
        let bits = (s(0) >> 12) | ((s(1) >> 8) & 0x00F0) | ((s(2) >> 4) & 0x0F00) | (s(3) & 0xF000);
        bits.to_le_bytes()
    }
}

/// Base-3 digit `n` of a TQ1_0 byte: the byte times 3^n (wrapping) holds the digit's
/// fraction in its top bits.
#[inline]
pub fn tq1_digit(q: u8, n: usize) -> i8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let q = q.wrapping_mul(POW3[n]);
    (((q as u16) * 3) >> 8) as i8 - 1
}

impl Decode for BlockTQ1_0 {
    fn decode(&self) -> Decoded {
        let mut o = Decoded {
            ls: [1; 16],
            ..Default::default()
        };
        for n in 0..5 {
            for m in 0..32 {
                o.v[32 * n + m] = tq1_digit(self.qs[m], n);
            }
            for m in 0..16 {
                o.v[160 + 16 * n + m] = tq1_digit(self.qs[32 + m], n);
            }
        }
        for n in 0..4 {
            for m in 0..4 {
                o.v[240 + 4 * n + m] = tq1_digit(self.qh[m], n);
            }
        }
        o
    }
}

impl Decode for BlockTQ2_0 {
    fn decode(&self) -> Decoded {
        let mut o = Decoded {
            ls: [1; 16],
            ..Default::default()
        };
        for (e, v) in o.v.iter_mut().enumerate() {
            let (j, l, m) = (e / 128, (e / 32) % 4, e % 32);
            *v = ((self.qs[32 * j + m] >> (2 * l)) & 3) as i8 - 1;
        }
        o
    }
}

// ---- dequantization ---------------------------------------------------------------------

/// IQ2 / IQ3 with a half-step scale: `x = (d·(0.5 + s)·k) · w` per group of 16 with 4-bit `s`
/// (`ls = 2s + 1`), the sign inside `w` (negation commutes with rounding).
pub(crate) fn dequantize_half_step(d: [u8; 2], k: f32, dec: &Decoded, out: &mut [f32]) {
    let d = f16_to_f32(d);
    for (g, &ls) in dec.ls.iter().enumerate() {
        let db = d * (0.5 + ((ls - 1) / 2) as f32) * k;
        let range = 16 * g..16 * g + 16;
        for (o, &v) in out[range.clone()].iter_mut().zip(&dec.v[range]) {
            *o = db * v as f32;
        }
    }
}

/// `impl Dequantize` through [`dequantize_half_step`] with the block's `d` and factor `k`.
macro_rules! half_step_dequantize {
    ($($blk:ty => $k:expr),* $(,)?) => {
        $(impl Dequantize for $blk {
            fn dequantize(&self, out: &mut [f32]) {
                dequantize_half_step(self.d, $k, &self.decode(), out);
            }
        })*
    };
}
half_step_dequantize!(
    BlockIQ2XXS => 0.25,
    BlockIQ2XS => 0.25,
    BlockIQ2S => 0.25,
    BlockIQ3XXS => 0.5,
);

/// `x = (d·ls) · w` per group of 16 (IQ3_S's `1 + 2s`, the ternary types' 1).
pub(crate) fn dequantize_int_scale(d: f32, dec: &Decoded, out: &mut [f32]) {
    for (g, &ls) in dec.ls.iter().enumerate() {
        let db = d * ls as f32;
        let range = 16 * g..16 * g + 16;
        for (o, &v) in out[range.clone()].iter_mut().zip(&dec.v[range]) {
            *o = db * v as f32;
        }
    }
}

impl Dequantize for BlockIQ3S {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_int_scale(f16_to_f32(self.d), &self.decode(), out);
    }
}

/// IQ1: `x = (d·ls) · (g + δ)` with δ = ±1/8 per group of 8.
fn dequantize_iq1(d: f32, dec: &Decoded, deltas: &[i32; 32], out: &mut [f32]) {
    for (e, o) in out[..QK_K].iter_mut().enumerate() {
        let dl = d * dec.ls[e / 16] as f32;
        *o = dl * (dec.v[e] as f32 + deltas[e / 8] as f32 * IQ1_DELTA);
    }
}

impl Dequantize for BlockIQ1S {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_iq1(f16_to_f32(self.d), &self.decode(), &self.deltas(), out);
    }
}

impl Dequantize for BlockIQ1M {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_iq1(f16_to_f32(self.d()), &self.decode(), &self.deltas(), out);
    }
}

impl Dequantize for BlockTQ1_0 {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_ternary(f16_to_f32(self.d), &self.decode(), out);
    }
}

impl Dequantize for BlockTQ2_0 {
    fn dequantize(&self, out: &mut [f32]) {
        dequantize_ternary(f16_to_f32(self.d), &self.decode(), out);
    }
}

/// Ternary: `x = d · q` (gguf-py multiplies by the scale without a sub-scale).
fn dequantize_ternary(d: f32, dec: &Decoded, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(&dec.v) {
        *o = d * v as f32;
    }
}

// ---- dot products against Q8_K ----------------------------------------------------------

/// The exact integer `Σ_g ls[g] · Σ_{e in g} v[e]·y[e]` of one super-block.
#[inline]
pub fn block_sum(dec: &Decoded, y: &BlockQ8K) -> i32 {
    let mut bsum = 0i32;
    for (g, &ls) in dec.ls.iter().enumerate() {
        let s: i32 = (16 * g..16 * g + 16)
            .map(|e| dec.v[e] as i32 * y.qs[e] as i32)
            .sum();
        bsum += ls * s;
    }
    bsum
}

/// `post · Σ_blocks (d_x·d_y) · bsum` (the IQ2 / IQ3 / ternary references' float structure).
fn dot_scaled<B: Decode>(w: &[B], a: &[BlockQ8K], dx: impl Fn(&B) -> f32, post: f32) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        sumf += (dx(x) * y.d) * block_sum(&x.decode(), y) as f32;
    }
    post * sumf
}

/// `pub fn name(w: &[Block], a: &[BlockQ8K]) -> f32`: [`dot_scaled`] with the block's f16 `d`
/// and ggml's factor `post`, for each listed type.
macro_rules! scaled_dots {
    ($($name:ident($blk:ty) => $post:expr),* $(,)?) => {
        $(pub fn $name(w: &[$blk], a: &[BlockQ8K]) -> f32 {
            dot_scaled(w, a, |x| f16_to_f32(x.d), $post)
        })*
    };
}
scaled_dots!(
    dot_iq2xxs_q8k(BlockIQ2XXS) => 0.125,
    dot_iq2xs_q8k(BlockIQ2XS) => 0.125,
    dot_iq2s_q8k(BlockIQ2S) => 0.125,
    dot_iq3xxs_q8k(BlockIQ3XXS) => 0.25,
    dot_iq3s_q8k(BlockIQ3S) => 1.0,
    dot_tq1_0_q8k(BlockTQ1_0) => 1.0,
    dot_tq2_0_q8k(BlockTQ2_0) => 1.0,
);

/// IQ1: `(d_x·d_y) · (Σ ls·Σ g·y + δ · Σ ls·sign·Σ y)` per block (the sums of y per 8 taken
/// from the quants; per 16 from `bsums` in the reference, the same integers).
fn dot_iq1(dec: &Decoded, deltas: &[i32; 32], y: &BlockQ8K) -> f32 {
    let sumi = block_sum(dec, y);
    let mut sumi1 = 0i32;
    for (g, &sign) in deltas.iter().enumerate() {
        let ys: i32 = y.qs[8 * g..8 * g + 8].iter().map(|&q| q as i32).sum();
        sumi1 += dec.ls[g / 2] * sign * ys;
    }
    sumi as f32 + IQ1_DELTA * sumi1 as f32
}

pub fn dot_iq1s_q8k(w: &[BlockIQ1S], a: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        sumf += f16_to_f32(x.d) * y.d * dot_iq1(&x.decode(), &x.deltas(), y);
    }
    sumf
}

pub fn dot_iq1m_q8k(w: &[BlockIQ1M], a: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        sumf += f16_to_f32(x.d()) * y.d * dot_iq1(&x.decode(), &x.deltas(), y);
    }
    sumf
}
