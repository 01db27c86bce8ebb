//! GGML quantized block formats, as laid out in GGUF files (ggml/src/ggml-common.h) with scalar
//! reference dequantization. Every SIMD kernel is tested against these references.

use thiserror::Error;

pub mod act;
pub mod blocks;
pub mod convert;
pub mod dequant;
pub mod dot;
pub mod iq;
pub mod iq_grids;
pub mod repack;
pub(crate) mod repack_k;

use blocks::*;
use dequant::dequantize_blocks;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("unknown ggml type id {0}")]
    UnknownType(u32),
    #[error("tensor type {name} is not supported for {1}", name = .0.name())]
    Unsupported(GgmlType, &'static str),
    #[error("row of {cols} elements is not a multiple of the {ty:?} block size {block}")]
    Misaligned {
        ty: GgmlType,
        cols: usize,
        block: usize,
    },
    #[error("buffer of {got} bytes, expected {expected}")]
    Length { got: usize, expected: usize },
}

/// ggml tensor type ids (the numbering in GGUF tensor infos).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    IQ2XXS = 16,
    IQ2XS = 17,
    IQ3XXS = 18,
    IQ1S = 19,
    IQ4NL = 20,
    IQ3S = 21,
    IQ2S = 22,
    IQ4XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

impl GgmlType {
    pub fn from_id(id: u32) -> Result<Self, QuantError> {
        use GgmlType::*;
        Ok(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            16 => IQ2XXS,
            17 => IQ2XS,
            18 => IQ3XXS,
            19 => IQ1S,
            20 => IQ4NL,
            21 => IQ3S,
            22 => IQ2S,
            23 => IQ4XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            39 => MXFP4,
            other => return Err(QuantError::UnknownType(other)),
        })
    }

    /// Name as ggml prints it (`Q4_K`, `F16`, ...).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            IQ2XXS => "IQ2_XXS",
            IQ2XS => "IQ2_XS",
            IQ3XXS => "IQ3_XXS",
            IQ1S => "IQ1_S",
            IQ4NL => "IQ4_NL",
            IQ3S => "IQ3_S",
            IQ2S => "IQ2_S",
            IQ4XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// (elements per block, bytes per block).
    pub fn block_layout(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2K => (256, 84),
            Q3K => (256, 110),
            Q4K => (256, 144),
            Q5K => (256, 176),
            Q6K => (256, 210),
            Q8K => (256, 292),
            IQ2XXS => (256, 66),
            IQ2XS => (256, 74),
            IQ3XXS => (256, 98),
            IQ1S => (256, 50),
            IQ4NL => (32, 18),
            IQ3S => (256, 110),
            IQ2S => (256, 82),
            IQ4XS => (256, 136),
            IQ1M => (256, 56),
            TQ1_0 => (256, 54),
            TQ2_0 => (256, 66),
            MXFP4 => (32, 17),
        }
    }

    pub fn block_size(self) -> usize {
        self.block_layout().0
    }

    pub fn type_size(self) -> usize {
        self.block_layout().1
    }

    /// Bytes of one row of `cols` elements; `None` when `cols` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        let (bs, ts) = self.block_layout();
        if !cols.is_multiple_of(bs) {
            return None;
        }
        (cols / bs).checked_mul(ts)
    }

    /// [`row_bytes`](Self::row_bytes) as a `Misaligned` error when there is none.
    pub fn row_bytes_checked(self, cols: usize) -> Result<usize, QuantError> {
        self.row_bytes(cols).ok_or(QuantError::Misaligned {
            ty: self,
            cols,
            block: self.block_size(),
        })
    }
}

/// Checks that `got` bytes are one row of `cols` elements of `ty`.
fn check_row(ty: GgmlType, cols: usize, got: usize) -> Result<(), QuantError> {
    let expected = ty.row_bytes_checked(cols)?;
    if got != expected {
        return Err(QuantError::Length { got, expected });
    }
    Ok(())
}

/// Dequantizes one row (`out.len()` elements) from its raw bytes.
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_row(ty, out.len(), bytes.len())?;
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16_to_f32([c[0], c[1]]);
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        GgmlType::Q4_0 => dequantize_blocks::<BlockQ4_0>(bytes, out),
        GgmlType::Q4_1 => dequantize_blocks::<BlockQ4_1>(bytes, out),
        GgmlType::Q5_0 => dequantize_blocks::<BlockQ5_0>(bytes, out),
        GgmlType::Q5_1 => dequantize_blocks::<BlockQ5_1>(bytes, out),
        GgmlType::Q8_0 => dequantize_blocks::<BlockQ8_0>(bytes, out),
        GgmlType::Q8_1 => dequantize_blocks::<BlockQ8_1>(bytes, out),
        GgmlType::Q2K => dequantize_blocks::<BlockQ2K>(bytes, out),
        GgmlType::Q3K => dequantize_blocks::<BlockQ3K>(bytes, out),
        GgmlType::Q4K => dequantize_blocks::<BlockQ4K>(bytes, out),
        GgmlType::Q5K => dequantize_blocks::<BlockQ5K>(bytes, out),
        GgmlType::Q6K => dequantize_blocks::<BlockQ6K>(bytes, out),
        GgmlType::IQ4NL => dequantize_blocks::<BlockIQ4NL>(bytes, out),
        GgmlType::IQ4XS => dequantize_blocks::<BlockIQ4XS>(bytes, out),
        GgmlType::MXFP4 => dequantize_blocks::<BlockMXFP4>(bytes, out),
        GgmlType::IQ2XXS => dequantize_blocks::<BlockIQ2XXS>(bytes, out),
        GgmlType::IQ2XS => dequantize_blocks::<BlockIQ2XS>(bytes, out),
        GgmlType::IQ2S => dequantize_blocks::<BlockIQ2S>(bytes, out),
        GgmlType::IQ3XXS => dequantize_blocks::<BlockIQ3XXS>(bytes, out),
        GgmlType::IQ3S => dequantize_blocks::<BlockIQ3S>(bytes, out),
        GgmlType::IQ1S => dequantize_blocks::<BlockIQ1S>(bytes, out),
        GgmlType::IQ1M => dequantize_blocks::<BlockIQ1M>(bytes, out),
        GgmlType::TQ1_0 => dequantize_blocks::<BlockTQ1_0>(bytes, out),
        GgmlType::TQ2_0 => dequantize_blocks::<BlockTQ2_0>(bytes, out),
        GgmlType::Q8K => {
            for (b, o) in bytes.chunks_exact(292).zip(out.chunks_exact_mut(QK_K)) {
                BlockQ8K::from_bytes(b).dequantize(o);
            }
        }
        other => return Err(QuantError::Unsupported(other, "dequantization")),
    }
    Ok(())
}

/// The activation format a weight type's integer dot product consumes (ggml's `vec_dot_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActType {
    F32,
    /// bf16 (round to nearest even): BF16 weights where the CPU has `vdpbf16ps`
    /// ([`crate::matmul::WeightMatrix::act_type`]), as ggml's `vec_dot_type` for BF16.
    Bf16,
    Q8_0,
    Q8_1,
    Q8K,
}

impl GgmlType {
    /// Activation format paired with this weight type; `None` when there is no dot product.
    pub fn act_type(self) -> Option<ActType> {
        use GgmlType::*;
        Some(match self {
            F32 | F16 | BF16 => ActType::F32,
            Q4_0 | Q5_0 | Q8_0 | Q8_1 | IQ4NL | MXFP4 => ActType::Q8_0,
            Q4_1 | Q5_1 => ActType::Q8_1,
            Q2K | Q3K | Q4K | Q5K | Q6K | Q8K | IQ4XS => ActType::Q8K,
            IQ2XXS | IQ2XS | IQ2S | IQ3XXS | IQ3S | IQ1S | IQ1M | TQ1_0 | TQ2_0 => ActType::Q8K,
            _ => return None,
        })
    }
}

/// One activation row in the format its weight type's dot product consumes.
#[derive(Debug, Clone, Copy)]
pub enum ActRow<'a> {
    F32(&'a [f32]),
    /// bf16 bit patterns.
    Bf16(&'a [u16]),
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
    Q8K(&'a [BlockQ8K]),
}

impl ActRow<'_> {
    pub fn act_type(&self) -> ActType {
        match self {
            ActRow::F32(_) => ActType::F32,
            ActRow::Bf16(_) => ActType::Bf16,
            ActRow::Q8_0(_) => ActType::Q8_0,
            ActRow::Q8_1(_) => ActType::Q8_1,
            ActRow::Q8K(_) => ActType::Q8K,
        }
    }

    /// Number of activation elements.
    pub fn len(&self) -> usize {
        match self {
            ActRow::F32(x) => x.len(),
            ActRow::Bf16(x) => x.len(),
            ActRow::Q8_0(b) => b.len() * 32,
            ActRow::Q8_1(b) => b.len() * 32,
            ActRow::Q8K(b) => b.len() * QK_K,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Scalar reference dot product of one weight row (raw bytes of type `ty`) with an activation
/// row of the paired format.
pub fn dot_row_ref(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> Result<f32, QuantError> {
    check_row(ty, a.len(), w.len())?;
    fn b<B: Block>(w: &[u8]) -> &[B] {
        as_blocks(w).expect("length checked")
    }
    use GgmlType as T;
    Ok(match (ty, a) {
        (T::F32 | T::F16 | T::BF16, ActRow::F32(x)) => {
            let mut acc = 0f32;
            let es = ty.type_size();
            for (c, &xv) in w.chunks_exact(es).zip(x) {
                let wv = match ty {
                    T::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    T::F16 => f16_to_f32([c[0], c[1]]),
                    _ => f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16),
                };
                acc += wv * xv;
            }
            acc
        }
        (T::BF16, ActRow::Bf16(x)) => {
            let w: Vec<u16> = w
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            act::dot_bf16_pairs(&w, x)
        }
        (T::Q4_0, ActRow::Q8_0(y)) => dot::dot_q4_0_q8_0(b(w), y),
        (T::Q5_0, ActRow::Q8_0(y)) => dot::dot_q5_0_q8_0(b(w), y),
        (T::Q8_0, ActRow::Q8_0(y)) => dot::dot_q8_0_q8_0(b(w), y),
        (T::Q8_1, ActRow::Q8_0(y)) => dot::dot_q8_1_q8_0(b(w), y),
        (T::IQ4NL, ActRow::Q8_0(y)) => dot::dot_iq4nl_q8_0(b(w), y),
        (T::MXFP4, ActRow::Q8_0(y)) => dot::dot_mxfp4_q8_0(b(w), y),
        (T::Q4_1, ActRow::Q8_1(y)) => dot::dot_q4_1_q8_1(b(w), y),
        (T::Q5_1, ActRow::Q8_1(y)) => dot::dot_q5_1_q8_1(b(w), y),
        (T::Q2K, ActRow::Q8K(y)) => dot::dot_q2k_q8k(b(w), y),
        (T::Q3K, ActRow::Q8K(y)) => dot::dot_q3k_q8k(b(w), y),
        (T::Q4K, ActRow::Q8K(y)) => dot::dot_q4k_q8k(b(w), y),
        (T::Q5K, ActRow::Q8K(y)) => dot::dot_q5k_q8k(b(w), y),
        (T::Q6K, ActRow::Q8K(y)) => dot::dot_q6k_q8k(b(w), y),
        (T::IQ4XS, ActRow::Q8K(y)) => dot::dot_iq4xs_q8k(b(w), y),
        (T::IQ2XXS, ActRow::Q8K(y)) => iq::dot_iq2xxs_q8k(b(w), y),
        (T::IQ2XS, ActRow::Q8K(y)) => iq::dot_iq2xs_q8k(b(w), y),
        (T::IQ2S, ActRow::Q8K(y)) => iq::dot_iq2s_q8k(b(w), y),
        (T::IQ3XXS, ActRow::Q8K(y)) => iq::dot_iq3xxs_q8k(b(w), y),
        (T::IQ3S, ActRow::Q8K(y)) => iq::dot_iq3s_q8k(b(w), y),
        (T::IQ1S, ActRow::Q8K(y)) => iq::dot_iq1s_q8k(b(w), y),
        (T::IQ1M, ActRow::Q8K(y)) => iq::dot_iq1m_q8k(b(w), y),
        (T::TQ1_0, ActRow::Q8K(y)) => iq::dot_tq1_0_q8k(b(w), y),
        (T::TQ2_0, ActRow::Q8K(y)) => iq::dot_tq2_0_q8k(b(w), y),
        (T::Q8K, ActRow::Q8K(y)) => {
            let wb: Vec<BlockQ8K> = w.chunks_exact(292).map(BlockQ8K::from_bytes).collect();
            dot::dot_q8k_q8k(&wb, y)
        }
        _ => {
            return Err(QuantError::Unsupported(
                ty,
                "dot product with this activation",
            ))
        }
    })
}
