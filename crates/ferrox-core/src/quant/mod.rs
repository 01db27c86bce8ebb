//! GGML quantized block formats, as laid out in GGUF files (ggml/src/ggml-common.h) with scalar
//! reference dequantization. Every SIMD kernel is tested against these references.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("unknown ggml type id {0}")]
    UnknownType(u32),
    #[error("tensor type {0:?} is not supported for {1}")]
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
}

/// Dequantizes one row (`out.len()` elements) from its raw bytes.
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let expected = ty.row_bytes(out.len()).ok_or(QuantError::Misaligned {
        ty,
        cols: out.len(),
        block: ty.block_size(),
    })?;
    if bytes.len() != expected {
        return Err(QuantError::Length {
            got: bytes.len(),
            expected,
        });
    }
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        other => return Err(QuantError::Unsupported(other, "dequantization")),
    }
    Ok(())
}
