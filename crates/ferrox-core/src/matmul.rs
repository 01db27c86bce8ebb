//! `WeightMatrix`: the only door from model code into the kernels. A weight is `rows` output
//! features by `cols` input features, stored row-major in its GGML type, borrowed from the map.
//!
//! On CPUs with interleaved kernels, `interleave` repacks a matrix at load into 16-row groups
//! (`quant::repack`); the map's pages of the original are then released.
//!
//! Batch invariance: every output element is produced by the same per-row reduction whatever
//! the batch size or thread split, so `gemm` rows are bit-identical to `gemv`.

use crate::kernels;
use crate::quant::{self, repack, ActBuf, GgmlType, QuantError};
use crate::storage::Bytes;
use rayon::prelude::*;

#[derive(Clone, Debug)]
pub struct WeightMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    /// Rows in ggml layout, or (`interleaved`) groups of 16 rows in the `quant::repack` layout.
    data: Bytes,
    interleaved: bool,
}

impl WeightMatrix {
    /// A matrix over `data`; refuses a type with no dot-product kernel (a load-time error
    /// naming the type, rather than a panic at the first token).
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: Bytes) -> Result<Self, QuantError> {
        if ty.act_type().is_none() {
            return Err(QuantError::Unsupported(ty, "matrix products"));
        }
        let row_bytes = ty.row_bytes_checked(cols)?;
        let expected = row_bytes.checked_mul(rows).ok_or(QuantError::Length {
            got: data.len(),
            expected: usize::MAX,
        })?;
        if data.len() != expected {
            return Err(QuantError::Length {
                got: data.len(),
                expected,
            });
        }
        Ok(WeightMatrix {
            ty,
            rows,
            cols,
            row_bytes,
            data,
            interleaved: false,
        })
    }

    /// This matrix in the interleaved layout when the process's kernels have one for its type
    /// (and its rows come in whole groups of 16); otherwise unchanged. The copy is owned and
    /// the original's pages are released from resident memory.
    pub fn interleave(self) -> Self {
        let isa = kernels::isa();
        if self.interleaved
            || !kernels::interleaves(isa, self.ty)
            || !self.rows.is_multiple_of(repack::X16)
        {
            return self;
        }
        let mut out = vec![0u8; self.data.len()];
        let chunk = repack::X16 * self.row_bytes * REPACK_GROUPS;
        let (ty, cols) = (self.ty, self.cols);
        // Each source chunk is released as soon as it is copied, so the peak resident memory
        // of a load stays near the model's size rather than twice a large tensor's.
        out.par_chunks_mut(chunk).enumerate().for_each(|(c, d)| {
            let src = self
                .data
                .slice(c * chunk, d.len())
                .expect("inside the matrix");
            repack::repack(ty, cols, &src, d);
            src.release();
        });
        WeightMatrix {
            data: Bytes::from_vec(out),
            interleaved: true,
            ..self
        }
    }

    pub fn is_interleaved(&self) -> bool {
        self.interleaved
    }

    /// An owned f32 matrix (tests, random weights, converted safetensors).
    pub fn from_f32(rows: usize, cols: usize, values: &[f32]) -> Self {
        assert_eq!(values.len(), rows * cols, "from_f32: wrong element count");
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::new(GgmlType::F32, rows, cols, Bytes::from_vec(bytes)).expect("f32 layout")
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Dequantizes row `r` into `out` (`cols` elements): embedding lookups.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        if self.interleaved {
            let mut row = vec![0u8; self.row_bytes];
            repack::unpack_row(self.ty, self.cols, &self.data, r, &mut row);
            return quant::dequantize_row(self.ty, &row, out);
        }
        quant::dequantize_row(
            self.ty,
            &self.data[r * self.row_bytes..(r + 1) * self.row_bytes],
            out,
        )
    }

    /// y[rows] = W · x[cols].
    pub fn gemv(&self, x: &[f32], y: &mut [f32]) {
        self.gemm(x, 1, y)
    }

    /// Y[n, rows] = X[n, cols] · Wᵀ.
    ///
    /// X is quantized once into the weight type's activation format (thread-local scratch);
    /// each weight row is read once for all `n` tokens; every output uses the same kernel
    /// instruction sequence as `gemv`, so row b of Y is bit-identical to `gemv(X[b])`.
    pub fn gemm(&self, x: &[f32], n: usize, y: &mut [f32]) {
        assert_eq!(x.len(), n * self.cols, "gemm: input shape");
        assert_eq!(y.len(), n * self.rows, "gemm: output shape");
        if n == 0 || self.rows == 0 {
            return;
        }
        let act = self
            .ty
            .act_type()
            .expect("WeightMatrix::new refuses types without a kernel");
        // Taken out (not borrowed) so a nested call on this thread cannot conflict.
        let mut acts = ACTS.with(|c| c.take());
        acts.quantize(act, x, self.cols);
        self.gemm_quantized(&acts, n, y);
        ACTS.with(|c| c.replace(acts));
    }

    fn gemm_quantized(&self, acts: &ActBuf, n: usize, y: &mut [f32]) {
        let isa = kernels::isa();
        let rows = self.rows;
        let out = SyncPtr(y.as_mut_ptr());
        let threads = crate::pool::threads();
        let work = self.row_bytes.saturating_mul(rows).saturating_mul(n.min(8));
        let serial = threads <= 1 || work < PAR_MIN_BYTES;
        if self.interleaved {
            let group = repack::X16 * self.row_bytes;
            let run = |g0: usize, g1: usize| {
                let w = &self.data[g0 * group..g1 * group];
                for t0 in (0..n).step_by(kernels::X16_MAX_TOKENS) {
                    let nt = (n - t0).min(kernels::X16_MAX_TOKENS);
                    // SAFETY: the matrix is interleaved only when `interleaves(isa, ty)`; the
                    // activations are `n` rows of this type's format; the kernel writes
                    // y[(t0 + k) * rows + r] for rows r of groups g0..g1 only, which this
                    // task owns (tasks take disjoint group ranges).
                    unsafe {
                        kernels::gemm_x16(
                            isa,
                            self.ty,
                            w,
                            acts,
                            t0,
                            nt,
                            out.get().add(t0 * rows + g0 * repack::X16),
                            rows,
                        )
                    };
                }
            };
            let groups = rows / repack::X16;
            if serial {
                run(0, groups);
                return;
            }
            let chunk = groups.div_ceil(threads * TASKS_PER_THREAD);
            crate::pool::for_each(groups.div_ceil(chunk), |c| {
                run(c * chunk, ((c + 1) * chunk).min(groups));
            });
            return;
        }
        let (block_rows, token_group) = isa.tile(self.ty);
        assert!(
            block_rows * token_group <= TILE_MAX,
            "kernel tile fits the buffer"
        );
        let run = |r0: usize, r1: usize| {
            let mut tmp = [0f32; TILE_MAX];
            for t0 in (0..n).step_by(token_group) {
                let nt = (n - t0).min(token_group);
                for b0 in (r0..r1).step_by(block_rows) {
                    let b1 = (b0 + block_rows).min(r1);
                    let w = &self.data[b0 * self.row_bytes..b1 * self.row_bytes];
                    let o = &mut tmp[..(b1 - b0) * nt];
                    kernels::dot_block(isa, self.ty, w, acts, t0, nt, o);
                    for (i, r) in (b0..b1).enumerate() {
                        for k in 0..nt {
                            // SAFETY: (t0 + k, r) is inside y (n x rows) and each (token, row)
                            // is written by exactly one task: tasks own disjoint row ranges.
                            unsafe { out.get().add((t0 + k) * rows + r).write(o[i * nt + k]) };
                        }
                    }
                }
            }
        };
        if serial {
            run(0, rows);
            return;
        }
        let chunk = rows
            .div_ceil(threads * TASKS_PER_THREAD)
            .max(MIN_CHUNK_ROWS);
        let n_chunks = rows.div_ceil(chunk);
        crate::pool::for_each(n_chunks, |c| {
            let r0 = c * chunk;
            run(r0, (r0 + chunk).min(rows));
        });
    }
}

/// Groups of 16 rows repacked (and their source released) per task at load.
const REPACK_GROUPS: usize = 16;

/// Largest rows × tokens tile a kernel asks for (`Isa::tile`).
const TILE_MAX: usize = 1024;
/// Below this many weight bytes (× tokens, capped) a product runs on the calling thread.
const PAR_MIN_BYTES: usize = 64 * 1024;
const TASKS_PER_THREAD: usize = 4;
const MIN_CHUNK_ROWS: usize = 8;

thread_local! {
    static ACTS: std::cell::RefCell<ActBuf> = std::cell::RefCell::new(ActBuf::default());
}

#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
// SAFETY: used only to write disjoint elements from parallel tasks (see gemm_quantized).
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}
impl SyncPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_rows_equal_gemv() {
        let (rows, cols, n) = (70, 40, 3);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let m = WeightMatrix::from_f32(rows, cols, &w);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let mut y = vec![0f32; n * rows];
        m.gemm(&x, n, &mut y);
        for b in 0..n {
            let mut yb = vec![0f32; rows];
            m.gemv(&x[b * cols..(b + 1) * cols], &mut yb);
            assert_eq!(&y[b * rows..(b + 1) * rows], &yb[..]);
        }
    }
}
