//! Shared test helpers: random rows of every block type.
#![allow(dead_code)]

use ferrox_core::quant::blocks::*;
use ferrox_core::quant::GgmlType;
use rand::rngs::StdRng;
use rand::Rng;

/// Byte offsets of the f16 fields of each block type (kept finite in random blocks).
pub fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4NL | IQ4XS => &[0],
        IQ2XXS | IQ2XS | IQ2S | IQ3XXS | IQ3S | IQ1S => &[0],
        TQ1_0 => &[52],
        TQ2_0 => &[64],
        Q4_1 | Q5_1 | Q8_1 | Q4K | Q5K => &[0, 2],
        Q2K => &[80, 82],
        Q3K => &[108],
        Q6K => &[208],
        _ => &[],
    }
}

/// Random row of `cols` elements of `ty`: random quant bits, finite scales; `extreme` picks
/// scales at the ends of the f16 range.
pub fn random_row(rng: &mut StdRng, ty: GgmlType, cols: usize, extreme: bool) -> Vec<u8> {
    let n = ty.row_bytes(cols).unwrap();
    let mut b: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
    match ty {
        GgmlType::F32 => {
            for c in b.chunks_exact_mut(4) {
                c.copy_from_slice(&(rng.gen_range(-1.0f32..1.0)).to_le_bytes());
            }
        }
        GgmlType::F16 | GgmlType::BF16 => {
            for c in b.chunks_exact_mut(2) {
                let v = rng.gen_range(-1.0f32..1.0) * if extreme { 6e4 } else { 1.0 };
                let bits = if ty == GgmlType::F16 {
                    half::f16::from_f32(v).to_le_bytes()
                } else {
                    half::bf16::from_f32(v).to_le_bytes()
                };
                c.copy_from_slice(&bits);
            }
        }
        GgmlType::Q8K => {
            for c in b.chunks_exact_mut(292) {
                c[..4].copy_from_slice(&rng.gen_range(-0.01f32..0.01).to_le_bytes());
                c[4..260]
                    .iter_mut()
                    .for_each(|q| *q = rng.gen_range(-127i8..=127) as u8);
                let blk = BlockQ8K::from_bytes(c);
                for (g, s) in blk.qs.chunks_exact(16).enumerate() {
                    let sum: i16 = s.iter().map(|&q| q as i16).sum();
                    c[260 + 2 * g..262 + 2 * g].copy_from_slice(&sum.to_le_bytes());
                }
            }
        }
        _ => {
            let ts = ty.type_size();
            for blk in b.chunks_exact_mut(ts) {
                for &f in f16_fields(ty) {
                    let v = if extreme {
                        [65504.0f32, -65504.0, 6e-8, -3e-5, 1e4][rng.gen_range(0..5)]
                    } else {
                        rng.gen_range(-0.05f32..0.05)
                    };
                    blk[f..f + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
                if ty == GgmlType::IQ1M {
                    // The f16 scale is the top nibbles of the four u16 scale words.
                    let v = if extreme {
                        6e4f32
                    } else {
                        rng.gen_range(-0.05f32..0.05)
                    };
                    let d = half::f16::from_f32(v).to_bits();
                    for k in 0..4 {
                        let o = 48 + 2 * k;
                        let w = u16::from_le_bytes([blk[o], blk[o + 1]]) & 0x0FFF;
                        let w = w | (((d >> (4 * k)) & 0xF) << 12);
                        blk[o..o + 2].copy_from_slice(&w.to_le_bytes());
                    }
                }
                if ty == GgmlType::MXFP4 {
                    blk[0] = if extreme {
                        [0u8, 1, 2, 200][rng.gen_range(0..4)]
                    } else {
                        rng.gen_range(115..135)
                    };
                }
                if ty == GgmlType::Q8_0 || ty == GgmlType::Q8_1 {
                    // -128 is never produced by the quantizer.
                    blk[ts - 32..].iter_mut().for_each(|q| {
                        if *q == 0x80 {
                            *q = 0x81
                        }
                    });
                }
            }
        }
    }
    b
}

/// The codebook-grid i-quants and the ternary types.
pub const GRID_TYPES: [GgmlType; 9] = [
    GgmlType::IQ2XXS,
    GgmlType::IQ2XS,
    GgmlType::IQ2S,
    GgmlType::IQ3XXS,
    GgmlType::IQ3S,
    GgmlType::IQ1S,
    GgmlType::IQ1M,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
];

/// Every type with a dot kernel (Q8_0 twice: once among the legacy types, once before the
/// grid types).
pub fn dot_types() -> impl Iterator<Item = GgmlType> {
    [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
        GgmlType::MXFP4,
        GgmlType::Q8_0,
    ]
    .into_iter()
    .chain(GRID_TYPES)
}
