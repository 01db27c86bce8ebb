//! The ggml types, one row each: id, name, block layout, the activation format its dot product
//! takes and its scalar references (dequantization, dot product) — ggml's `type_traits` table
//! (ggml/src/ggml.c) as data. A new type is a row here, its block struct (`blocks.rs`), its
//! reference functions (`dequant.rs`, `dot.rs`) and its kernels; nothing else in the format
//! layer matches on types.

use super::blocks::*;
use super::dequant::dequantize_blocks;
use super::{act, dot, iq, ActRow, ActType};

/// A scalar reference dequantization: one row's bytes to f32.
pub type DequantizeRow = fn(&[u8], &mut [f32]);

/// A scalar reference dot product of a weight row's bytes with an activation row; `None` when
/// the row is not in a format the type takes.
pub type DotRow = fn(&[u8], ActRow<'_>) -> Option<f32>;

/// What the format layer knows about one ggml type.
pub struct TypeTraits {
    /// The name ggml prints (`Q4_K`, `F16`, ...).
    pub name: &'static str,
    /// Elements per block, bytes per block.
    pub block: (usize, usize),
    /// The activation format its integer dot product consumes (ggml's `vec_dot_type`);
    /// `None`: no dot product (storage-only types).
    pub act: Option<ActType>,
    /// Scalar reference: one row's bytes (a whole number of blocks, checked by the caller)
    /// to f32.
    pub dequantize: Option<DequantizeRow>,
    /// Scalar reference dot product of one row with an activation row (lengths checked by
    /// the caller); `None` when the row is not in a format this type takes.
    pub dot: Option<DotRow>,
}

/// `bytes` as blocks of `B` (lengths checked by the caller).
fn blocks<B: Block>(bytes: &[u8]) -> &[B] {
    as_blocks(bytes).expect("row length checked by the caller")
}

/// A row for a block type `$blk` whose dot product takes `$act` rows through `$dot`.
macro_rules! quant {
    ($name:literal, $blk:ty, $act:ident, $dot:path) => {
        TypeTraits {
            name: $name,
            block: (<$blk as Block>::QK, std::mem::size_of::<$blk>()),
            act: Some(ActType::$act),
            dequantize: Some(dequantize_blocks::<$blk>),
            dot: Some(|w, a| match a {
                ActRow::$act(y) => Some($dot(blocks::<$blk>(w), y)),
                _ => None,
            }),
        }
    };
}

/// A row for a storage-only scalar type of `$bytes` bytes (no reference kernels).
macro_rules! storage {
    ($name:literal, $bytes:literal) => {
        TypeTraits {
            name: $name,
            block: (1, $bytes),
            act: None,
            dequantize: None,
            dot: None,
        }
    };
}

/// Declares [`GgmlType`] (variant = GGUF id) and its table from one list of rows.
macro_rules! ggml_types {
    ($($(#[$m:meta])* $v:ident = $id:literal => $row:expr,)*) => {
        /// ggml tensor type ids (the numbering in GGUF tensor infos).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum GgmlType {
            $($(#[$m])* $v = $id,)*
        }

        impl GgmlType {
            /// Every type, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$v,)*];

            /// The type's row of the table.
            pub fn traits(self) -> &'static TypeTraits {
                match self {
                    $(GgmlType::$v => const { &$row },)*
                }
            }
        }
    };
}

ggml_types! {
    F32 = 0 => TypeTraits {
        name: "F32",
        block: (1, 4),
        act: Some(ActType::F32),
        dequantize: Some(|b, out| float_row(b, out, 4, |c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        dot: Some(|w, a| float_dot(w, a, 4, |c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
    },
    F16 = 1 => TypeTraits {
        name: "F16",
        block: (1, 2),
        act: Some(ActType::F32),
        dequantize: Some(|b, out| float_row(b, out, 2, |c| f16_to_f32([c[0], c[1]]))),
        dot: Some(|w, a| float_dot(w, a, 2, |c| f16_to_f32([c[0], c[1]]))),
    },
    Q4_0 = 2 => quant!("Q4_0", BlockQ4_0, Q8_0, dot::dot_q4_0_q8_0),
    Q4_1 = 3 => quant!("Q4_1", BlockQ4_1, Q8_1, dot::dot_q4_1_q8_1),
    Q5_0 = 6 => quant!("Q5_0", BlockQ5_0, Q8_0, dot::dot_q5_0_q8_0),
    Q5_1 = 7 => quant!("Q5_1", BlockQ5_1, Q8_1, dot::dot_q5_1_q8_1),
    Q8_0 = 8 => quant!("Q8_0", BlockQ8_0, Q8_0, dot::dot_q8_0_q8_0),
    Q8_1 = 9 => quant!("Q8_1", BlockQ8_1, Q8_0, dot::dot_q8_1_q8_0),
    Q2K = 10 => quant!("Q2_K", BlockQ2K, Q8K, dot::dot_q2k_q8k),
    Q3K = 11 => quant!("Q3_K", BlockQ3K, Q8K, dot::dot_q3k_q8k),
    Q4K = 12 => quant!("Q4_K", BlockQ4K, Q8K, dot::dot_q4k_q8k),
    Q5K = 13 => quant!("Q5_K", BlockQ5K, Q8K, dot::dot_q5k_q8k),
    Q6K = 14 => quant!("Q6_K", BlockQ6K, Q8K, dot::dot_q6k_q8k),
    /// The K-quants' activation block, also a (rare) weight type: aligned, so read by value.
    Q8K = 15 => TypeTraits {
        name: "Q8_K",
        block: (QK_K, 292),
        act: Some(ActType::Q8K),
        dequantize: Some(|b, out| {
            for (b, o) in b.chunks_exact(292).zip(out.chunks_exact_mut(QK_K)) {
                BlockQ8K::from_bytes(b).dequantize(o);
            }
        }),
        dot: Some(|w, a| match a {
            ActRow::Q8K(y) => {
                let wb: Vec<BlockQ8K> = w.chunks_exact(292).map(BlockQ8K::from_bytes).collect();
                Some(dot::dot_q8k_q8k(&wb, y))
            }
            _ => None,
        }),
    },
    IQ2XXS = 16 => quant!("IQ2_XXS", BlockIQ2XXS, Q8K, iq::dot_iq2xxs_q8k),
    IQ2XS = 17 => quant!("IQ2_XS", BlockIQ2XS, Q8K, iq::dot_iq2xs_q8k),
    IQ3XXS = 18 => quant!("IQ3_XXS", BlockIQ3XXS, Q8K, iq::dot_iq3xxs_q8k),
    IQ1S = 19 => quant!("IQ1_S", BlockIQ1S, Q8K, iq::dot_iq1s_q8k),
    IQ4NL = 20 => quant!("IQ4_NL", BlockIQ4NL, Q8_0, dot::dot_iq4nl_q8_0),
    IQ3S = 21 => quant!("IQ3_S", BlockIQ3S, Q8K, iq::dot_iq3s_q8k),
    IQ2S = 22 => quant!("IQ2_S", BlockIQ2S, Q8K, iq::dot_iq2s_q8k),
    IQ4XS = 23 => quant!("IQ4_XS", BlockIQ4XS, Q8K, dot::dot_iq4xs_q8k),
    I8 = 24 => storage!("I8", 1),
    I16 = 25 => storage!("I16", 2),
    I32 = 26 => storage!("I32", 4),
    I64 = 27 => storage!("I64", 8),
    F64 = 28 => storage!("F64", 8),
    IQ1M = 29 => quant!("IQ1_M", BlockIQ1M, Q8K, iq::dot_iq1m_q8k),
    /// Against f32 activations, or bf16 pairs where the CPU multiplies them
    /// ([`crate::matmul::WeightMatrix::act_type`]).
    BF16 = 30 => TypeTraits {
        name: "BF16",
        block: (1, 2),
        act: Some(ActType::F32),
        dequantize: Some(|b, out| float_row(b, out, 2, bf16_bytes)),
        dot: Some(|w, a| match a {
            ActRow::Bf16(x) => {
                let w: Vec<u16> = w.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
                Some(act::dot_bf16_pairs(&w, x))
            }
            a => float_dot(w, a, 2, bf16_bytes),
        }),
    },
    TQ1_0 = 34 => quant!("TQ1_0", BlockTQ1_0, Q8K, iq::dot_tq1_0_q8k),
    TQ2_0 = 35 => quant!("TQ2_0", BlockTQ2_0, Q8K, iq::dot_tq2_0_q8k),
    MXFP4 = 39 => quant!("MXFP4", BlockMXFP4, Q8_0, dot::dot_mxfp4_q8_0),
}

fn bf16_bytes(c: &[u8]) -> f32 {
    f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)
}

/// A float row of `es`-byte elements through `value` (one element's bytes to f32).
fn float_row(bytes: &[u8], out: &mut [f32], es: usize, value: fn(&[u8]) -> f32) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(es)) {
        *o = value(c);
    }
}

/// Σ w·x in order over a float row of `es`-byte elements and f32 activations.
fn float_dot(w: &[u8], a: ActRow<'_>, es: usize, value: fn(&[u8]) -> f32) -> Option<f32> {
    let ActRow::F32(x) = a else { return None };
    let mut acc = 0f32;
    for (c, &xv) in w.chunks_exact(es).zip(x) {
        acc += value(c) * xv;
    }
    Some(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        let mut names = std::collections::HashSet::new();
        for &t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t as u32), Ok(t));
            assert!(names.insert(t.name()), "{} twice", t.name());
            let (qk, bytes) = t.block_layout();
            assert!(qk > 0 && bytes > 0, "{t:?}");
            // A type with a dot product has its reference dequantization too.
            assert!(
                t.act_type().is_none() || t.traits().dequantize.is_some(),
                "{t:?}"
            );
        }
        assert!(GgmlType::from_id(4).is_err());
    }
}
