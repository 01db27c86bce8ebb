//! `#[repr(C)]` block structs, byte-for-byte the layouts of ggml/src/ggml-common.h.
//!
//! Half-precision fields are stored as `[u8; 2]` (little-endian) so every weight block has
//! alignment 1 and a GGUF row can be viewed as `&[Block]` wherever it sits in the map.

pub const QK_K: usize = 256;

#[inline]
pub fn f16_to_f32(b: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(b).to_f32()
}

#[inline]
pub fn f32_to_f16(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// A quantized block that can be viewed in place over raw bytes.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, have alignment 1, no padding, and accept every bit
/// pattern (only integer / byte-array fields).
pub unsafe trait Block: Copy + 'static {
    /// Elements per block.
    const QK: usize;
}

/// Views `bytes` as blocks; `None` when the length is not a whole number of blocks.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> Option<&[B]> {
    const { assert!(std::mem::align_of::<B>() == 1) };
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    // SAFETY: `Block` guarantees alignment 1, no padding and every bit pattern valid; the
    // length is a whole number of blocks and the lifetime is tied to `bytes`.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) })
}

/// The raw bytes of a block slice (e.g. to build a `WeightMatrix` from quantized blocks).
pub fn blocks_as_bytes<B: Block>(blocks: &[B]) -> &[u8] {
    // SAFETY: `Block` types have no padding, so every byte is initialized.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

macro_rules! block {
    ($(#[$m:meta])* $name:ident, $qk:expr, $size:expr, { $($f:ident: $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name { $(pub $f: $t),* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
        // SAFETY: repr(C), only u8 / i8 arrays: alignment 1, no padding, any bit pattern.
        unsafe impl Block for $name {
            const QK: usize = $qk;
        }
    };
}
// The load-time layouts of `convert` are blocks too.
pub(super) use block;

block!(
    /// 4-bit, scale only: x = d * (q - 8).
    BlockQ4_0, 32, 18, { d: [u8; 2], qs: [u8; 16] });
block!(
    /// 4-bit with min: x = d * q + m.
    BlockQ4_1, 32, 20, { d: [u8; 2], m: [u8; 2], qs: [u8; 16] });
block!(
    /// 5-bit, scale only: x = d * (q - 16); bit 4 of element j is bit j of `qh`.
    BlockQ5_0, 32, 22, { d: [u8; 2], qh: [u8; 4], qs: [u8; 16] });
block!(
    /// 5-bit with min.
    BlockQ5_1, 32, 24, { d: [u8; 2], m: [u8; 2], qh: [u8; 4], qs: [u8; 16] });
block!(
    /// 8-bit, scale only (weights and the activation side of Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4).
    #[derive(Default)]
    BlockQ8_0, 32, 34, { d: [u8; 2], qs: [i8; 32] });
block!(
    /// 8-bit with `s = d * sum(qs)` (activation side of Q4_1/Q5_1).
    #[derive(Default)]
    BlockQ8_1, 32, 36, { d: [u8; 2], s: [u8; 2], qs: [i8; 32] });
block!(
    /// 2-bit K-quant: 16 sub-blocks of 16, 4-bit scale and min each.
    BlockQ2K, QK_K, 84,
    { scales: [u8; 16], qs: [u8; 64], d: [u8; 2], dmin: [u8; 2] });
block!(
    /// 3-bit K-quant: 16 sub-blocks of 16, 6-bit signed scales.
    BlockQ3K, QK_K, 110,
    { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: [u8; 2] });
block!(
    /// 4-bit K-quant: 8 sub-blocks of 32, 6-bit scale and min each.
    BlockQ4K, QK_K, 144,
    { d: [u8; 2], dmin: [u8; 2], scales: [u8; 12], qs: [u8; 128] });
block!(
    /// 5-bit K-quant.
    BlockQ5K, QK_K, 176,
    { d: [u8; 2], dmin: [u8; 2], scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] });
block!(
    /// 6-bit K-quant: 16 sub-blocks of 16, 8-bit signed scales.
    BlockQ6K, QK_K, 210,
    { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: [u8; 2] });
block!(
    /// 4-bit non-linear (codebook `IQ4NL_VALUES`), 32 per block.
    BlockIQ4NL, 32, 18, { d: [u8; 2], qs: [u8; 16] });
block!(
    /// 4-bit non-linear, super-block of 256 with 6-bit sub-block scales.
    BlockIQ4XS, QK_K, 136,
    { d: [u8; 2], scales_h: [u8; 2], scales_l: [u8; 4], qs: [u8; 128] });
block!(
    /// OCP microscaling FP4 (E2M1) with a shared E8M0 exponent.
    BlockMXFP4, 32, 17, { e: u8, qs: [u8; 16] });

block!(
    /// IQ2_XXS: per 32 elements two u32 — four 8-bit `IQ2XXS_GRID` indices, then four 7-bit
    /// sign indices (`KSIGNS_IQ2XS`) and a 4-bit scale in the top bits.
    BlockIQ2XXS, QK_K, 66, { d: [u8; 2], qs: [u8; 64] });
block!(
    /// IQ2_XS: per 8 elements a u16 of a 9-bit `IQ2XS_GRID` index and a 7-bit sign index;
    /// 4-bit scales per 16 elements.
    BlockIQ2XS, QK_K, 74, { d: [u8; 2], qs: [u8; 64], scales: [u8; 8] });
block!(
    /// IQ2_S: 8 low bits of a 10-bit `IQ2S_GRID` index per 8 elements (`qs[..32]`), explicit
    /// sign bytes (`qs[32..]`), the 2 high index bits in `qh`; 4-bit scales per 16.
    BlockIQ2S, QK_K, 82,
    { d: [u8; 2], qs: [u8; 64], qh: [u8; 8], scales: [u8; 8] });
block!(
    /// IQ3_XXS: an 8-bit `IQ3XXS_GRID` index per 4 elements (`qs[..64]`), then per 32
    /// elements a u32 of four 7-bit sign indices and a 4-bit scale (`qs[64..]`).
    BlockIQ3XXS, QK_K, 98, { d: [u8; 2], qs: [u8; 96] });
block!(
    /// IQ3_S: 9-bit `IQ3S_GRID` indices per 4 elements (low 8 in `qs`, the ninth in `qh`),
    /// explicit sign bits, 4-bit scales per 32.
    BlockIQ3S, QK_K, 110,
    { d: [u8; 2], qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4] });
block!(
    /// IQ1_S: 11-bit `IQ1S_GRID` indices per 8 elements (low 8 in `qs`, 3 each in `qh`);
    /// per 32, a 3-bit scale and the sign of the ±1/8 shift in the top bits of `qh`.
    BlockIQ1S, QK_K, 50, { d: [u8; 2], qs: [u8; 32], qh: [u8; 16] });
block!(
    /// IQ1_M: 11-bit `IQ1S_GRID` indices with a shift sign per 8 elements (`qs`, `qh`),
    /// 3-bit scales per 16 and the f16 super-scale spread over the top nibbles of `scales`.
    BlockIQ1M, QK_K, 56, { qs: [u8; 32], qh: [u8; 16], scales: [u8; 8] });
block!(
    /// TQ1_0: ternary, five base-3 digits per byte (`qs`), four in each of `qh`.
    BlockTQ1_0, QK_K, 54, { qs: [u8; 48], qh: [u8; 4], d: [u8; 2] });
block!(
    /// TQ2_0: ternary as 2-bit q − 1.
    BlockTQ2_0, QK_K, 66, { qs: [u8; 64], d: [u8; 2] });

/// 8-bit K-quant activation block (never a weight in practice). Owned, naturally aligned:
/// `d` is an f32 and `bsums` holds the sums of each group of 16 quants.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

/// IQ4_NL / IQ4_XS codebook.
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// E2M1 values, doubled (the E8M0 scale is halved to compensate).
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of 2^(e - 127) as f32 (ggml_e8m0_to_fp32_half), exact including subnormals.
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// Unpacks the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K / Q5_K block.
#[inline]
pub fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The 16 signed 6-bit scales of a Q3_K block.
#[inline]
pub fn q3k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = ((low | (high << 4)) as i8) - 32;
    }
    out
}

/// The 8 signed 6-bit scales of an IQ4_XS block.
#[inline]
pub fn iq4xs_scales(b: &BlockIQ4XS) -> [i32; 8] {
    let sh = u16::from_le_bytes(b.scales_h);
    let mut out = [0i32; 8];
    for (ib, o) in out.iter_mut().enumerate() {
        let lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let hi = ((sh >> (2 * ib)) & 3) as u8;
        *o = (lo | (hi << 4)) as i32 - 32;
    }
    out
}
