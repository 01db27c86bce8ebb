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
pub mod traits;

use blocks::{BlockQ8K, BlockQ8_0, BlockQ8_1, QK_K};
pub use traits::{GgmlType, TypeTraits};

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

impl GgmlType {
    pub fn from_id(id: u32) -> Result<Self, QuantError> {
        GgmlType::ALL
            .iter()
            .copied()
            .find(|&t| t as u32 == id)
            .ok_or(QuantError::UnknownType(id))
    }

    /// Name as ggml prints it (`Q4_K`, `F16`, ...).
    pub fn name(self) -> &'static str {
        self.traits().name
    }

    /// (elements per block, bytes per block).
    pub fn block_layout(self) -> (usize, usize) {
        self.traits().block
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
    let dequantize = ty.traits().dequantize;
    dequantize.ok_or(QuantError::Unsupported(ty, "dequantization"))?(bytes, out);
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
        self.traits().act
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
    ty.traits()
        .dot
        .and_then(|dot| dot(w, a))
        .ok_or(QuantError::Unsupported(
            ty,
            "dot product with this activation",
        ))
}
