//! `WeightMatrix`: the only door from model code into the kernels. A weight is `rows` output
//! features by `cols` input features, stored row-major in its GGML type, borrowed from the map.
//!
//! On CPUs with interleaved kernels, `interleave` repacks a matrix at load into 16-row groups
//! (`quant::repack`), or converts the types whose decode costs more than their bytes
//! (`quant::convert`); the map's pages of the original are then released.
//!
//! Batch invariance: every output element is produced by the same per-row reduction whatever
//! the batch size or thread split, so `gemm` rows are bit-identical to `gemv`.

use crate::kernels::{self, ActBuf};
use crate::quant::{self, convert, repack, ActType, GgmlType, QuantError};
use crate::storage::Bytes;
use rayon::prelude::*;

#[derive(Clone, Debug)]
pub struct WeightMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    /// Rows as `layout` says.
    data: Bytes,
    layout: Layout,
}

/// How a [`WeightMatrix`]'s bytes hold its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Rows of `ty` blocks, as in the file (or converted to `ty`: TQ1_0 to TQ2_0).
    Rows,
    /// Groups of 16 rows in the `quant::repack` layout.
    X16,
    /// Rows converted at load into a layout of `quant::convert` (the matrix keeps its type).
    Converted(convert::Conversion),
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
            layout: Layout::Rows,
        })
    }

    /// This matrix in the interleaved layout when the process's kernels have one for its type
    /// (and its rows come in whole groups of 16), or converted where they read a faster
    /// equivalent (`kernels::conversion`); otherwise unchanged. The copy is owned and the
    /// original's pages are released from resident memory.
    pub fn interleave(self) -> Self {
        let isa = kernels::isa();
        if self.layout != Layout::Rows {
            return self;
        }
        if let Some(conv) = kernels::conversion(isa, self.ty) {
            let (_, row_bytes) = conv.target(self.ty, self.cols);
            let extra = (row_bytes - self.row_bytes) * self.rows;
            if kernels::reserve_conversion(extra) {
                return self.convert(conv);
            }
        }
        if !kernels::interleaves(isa, self.ty) || !repack::fits(self.ty, self.rows, self.cols) {
            return self;
        }
        let (ty, cols) = (self.ty, self.cols);
        let data = self.rebuilt(self.row_bytes, |src, dst| {
            repack::repack(ty, cols, src, dst)
        });
        WeightMatrix {
            data,
            layout: Layout::X16,
            ..self
        }
    }

    /// The rows converted as `conv` says (an owned copy; the original's pages released).
    fn convert(self, conv: convert::Conversion) -> Self {
        let (ty, row_bytes) = conv.target(self.ty, self.cols);
        let data = self.rebuilt(row_bytes, |src, dst| convert::convert(self.ty, src, dst));
        let layout = match conv {
            convert::Conversion::Tq1ToTq2 => Layout::Rows,
            c => Layout::Converted(c),
        };
        WeightMatrix {
            ty,
            row_bytes,
            data,
            layout,
            ..self
        }
    }

    /// The rows rewritten into an owned, cache-line aligned buffer of `row_bytes` a row by
    /// `f(source rows, their new bytes)`, in parallel chunks of whole 16-row groups. Each
    /// source chunk is released as soon as it is copied, so the peak resident memory of a
    /// load stays near the model's size rather than twice a large tensor's.
    fn rebuilt(&self, row_bytes: usize, f: impl Fn(&[u8], &mut [u8]) + Sync) -> Bytes {
        let chunk_rows = repack::X16 * REPACK_GROUPS;
        Bytes::aligned_with(row_bytes * self.rows, |out| {
            out.par_chunks_mut(row_bytes * chunk_rows)
                .enumerate()
                .for_each(|(c, d)| {
                    let n = d.len() / row_bytes;
                    let src = self
                        .data
                        .slice(c * chunk_rows * self.row_bytes, n * self.row_bytes)
                        .expect("inside the matrix");
                    f(&src, d);
                    src.release();
                })
        })
    }

    pub fn is_interleaved(&self) -> bool {
        self.layout == Layout::X16
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
        let row = &self.data[r * self.row_bytes..(r + 1) * self.row_bytes];
        match self.layout {
            Layout::X16 => {
                let mut row = vec![0u8; self.row_bytes];
                repack::unpack_row(self.ty, self.cols, &self.data, r, &mut row);
                quant::dequantize_row(self.ty, &row, out)
            }
            Layout::Converted(conv) => {
                assert_eq!(out.len(), self.cols, "dequantize_row: output width");
                match conv {
                    convert::Conversion::Iq1Ternary => convert::dequantize_iq1t_row(row, out),
                    _ => convert::dequantize_iqn_row(self.ty, row, out),
                }
                Ok(())
            }
            Layout::Rows => quant::dequantize_row(self.ty, row, out),
        }
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
        let act = self.act_type();
        // Taken out (not borrowed) so a nested call on this thread cannot conflict.
        let mut acts = ACTS.with(|c| c.take());
        acts.quantize(act, x, self.cols);
        self.gemm_quantized(&acts, n, y);
        ACTS.with(|c| c.replace(acts));
    }

    /// The activation format `gemm` quantizes its input to (products that share an input
    /// quantize it once: [`ActBuf::quantize`], then [`gemm_batch`]).
    pub fn act_type(&self) -> ActType {
        if self.ty == GgmlType::BF16 && self.is_interleaved() && kernels::bf16_dot() {
            return ActType::Bf16;
        }
        self.ty
            .act_type()
            .expect("WeightMatrix::new refuses types without a kernel")
    }

    fn gemm_quantized(&self, acts: &ActBuf, n: usize, y: &mut [f32]) {
        let out = SyncPtr(y.as_mut_ptr());
        let threads = crate::pool::threads();
        let serial = threads <= 1 || self.work(n) < PAR_MIN_BYTES;
        let unit = self.row_unit();
        let units = self.rows.div_ceil(unit);
        if serial {
            self.run_rows(acts, 0, n, 0, self.rows, out);
            return;
        }
        let chunk = if self.is_interleaved() {
            units.div_ceil(threads * TASKS_PER_THREAD)
        } else {
            self.rows
                .div_ceil(threads * TASKS_PER_THREAD)
                .max(MIN_CHUNK_ROWS)
        };
        crate::pool::for_each(units.div_ceil(chunk), |c| {
            let (r0, r1) = (c * chunk * unit, ((c + 1) * chunk * unit).min(self.rows));
            self.run_rows(acts, 0, n, r0, r1, out);
        });
    }

    /// Weight bytes × tokens (capped) of a product over `n` tokens: what decides whether it is
    /// worth the pool.
    fn work(&self, n: usize) -> usize {
        self.row_bytes
            .saturating_mul(self.rows)
            .saturating_mul(n.min(8))
    }

    /// Rows a task's range is a multiple of: a group (interleaved) or one row.
    fn row_unit(&self) -> usize {
        if self.is_interleaved() {
            repack::X16
        } else {
            1
        }
    }

    /// Output rows `r0..r1` (multiples of 16 when interleaved, but `r1` at the end) for
    /// activation rows `a0..a0 + n`, written to `y[k * rows + r]` for token `k < n`.
    ///
    /// Callers hand each (token, row) to exactly one call, so parallel calls write disjoint
    /// elements of `y`, which is valid for `n * rows` elements.
    fn run_rows(&self, acts: &ActBuf, a0: usize, n: usize, r0: usize, r1: usize, y: SyncPtr) {
        let isa = kernels::isa();
        let rows = self.rows;
        assert!(a0 + n <= acts.rows() && r1 <= rows, "run_rows: range");
        assert_eq!(acts.act_type(), Some(self.act_type()), "activation format");
        assert_eq!(acts.cols(), self.cols, "activation width");
        if self.is_interleaved() {
            let group = repack::X16 * self.row_bytes;
            let (g0, g1) = (r0 / repack::X16, r1 / repack::X16);
            let w = &self.data[g0 * group..g1 * group];
            for t0 in (0..n).step_by(kernels::X16_MAX_TOKENS) {
                let nt = (n - t0).min(kernels::X16_MAX_TOKENS);
                // SAFETY: the matrix is interleaved only when `interleaves(isa, ty)`; the
                // activations are checked above to be this type's format and to hold rows
                // a0..a0 + n; the kernel writes y[(t0 + k) * rows + r] for rows r of groups
                // g0..g1 only, which this call owns (see above).
                unsafe {
                    kernels::gemm_x16(
                        isa,
                        self.ty,
                        w,
                        (acts, a0 + t0, nt),
                        y.get().add(t0 * rows + g0 * repack::X16),
                        rows,
                    )
                };
            }
            return;
        }
        let (block_rows, token_group) = isa.tile(self.ty);
        assert!(
            block_rows * token_group <= TILE_MAX,
            "kernel tile fits the buffer"
        );
        let mut tmp = [0f32; TILE_MAX];
        for t0 in (0..n).step_by(token_group) {
            let nt = (n - t0).min(token_group);
            for b0 in (r0..r1).step_by(block_rows) {
                let b1 = (b0 + block_rows).min(r1);
                let w = &self.data[b0 * self.row_bytes..b1 * self.row_bytes];
                let o = &mut tmp[..(b1 - b0) * nt];
                match self.layout {
                    Layout::Converted(conv) => {
                        let a = (acts, a0 + t0, nt);
                        kernels::dot_block_converted(isa, self.ty, conv, w, a, o)
                    }
                    _ => kernels::dot_block(isa, self.ty, w, acts, a0 + t0, nt, o),
                }
                for (i, r) in (b0..b1).enumerate() {
                    for k in 0..nt {
                        // SAFETY: (t0 + k, r) is inside y (n x rows) and owned by this call.
                        unsafe { y.get().add((t0 + k) * rows + r).write(o[i * nt + k]) };
                    }
                }
            }
        }
    }
}

/// One product of a [`gemm_batch`]: `y[off..off + n * w.rows()]`, as `[n, w.rows()]`, is
/// `acts[a0..a0 + n] · wᵀ`, with `acts` already quantized to `w.act_type()`.
#[derive(Clone, Copy)]
pub struct Gemm<'a> {
    pub w: &'a WeightMatrix,
    pub acts: &'a ActBuf,
    pub a0: usize,
    pub n: usize,
    pub off: usize,
}

/// Runs the products `job(0..count)` in one parallel region (the experts of a mixture: one
/// region for all their gate and up projections rather than one per matrix). Their output
/// ranges in `y` must come in increasing order without overlap. Each product's rows are
/// computed exactly as [`WeightMatrix::gemm`] computes them, so they equal `gemv` bit for bit.
pub fn gemm_batch<'a>(count: usize, job: impl Fn(usize) -> Gemm<'a> + Sync, y: &mut [f32]) {
    let mut end = 0;
    let mut work = 0usize;
    for i in 0..count {
        let j = job(i);
        assert!(
            j.off >= end,
            "gemm_batch: outputs overlap or are out of order"
        );
        end = j.off + j.n * j.w.rows;
        assert!(end <= y.len(), "gemm_batch: output shape");
        assert!(j.a0 + j.n <= j.acts.rows(), "gemm_batch: activation rows");
        work = work.saturating_add(j.w.work(j.n));
    }
    // SAFETY (of every write below): each product writes only inside its own checked range
    // `off..off + n * rows` of `y`, and within it each task owns its rows.
    let out = SyncPtr(y.as_mut_ptr());
    let at = |j: &Gemm<'_>| SyncPtr(out.get().wrapping_add(j.off));
    let threads = crate::pool::threads();
    if threads <= 1 || work < PAR_MIN_BYTES {
        for i in 0..count {
            let j = job(i);
            j.w.run_rows(j.acts, j.a0, j.n, 0, j.w.rows, at(&j));
        }
        return;
    }
    // Every product splits into the same number of parts, enough for the region to have about
    // as many tasks as one large `gemm`; a part is whole groups of rows (empty past the end).
    let parts = (threads * TASKS_PER_THREAD).div_ceil(count.max(1));
    crate::pool::for_each(count * parts, |task| {
        let (j, part) = (job(task / parts), task % parts);
        let unit = j.w.row_unit();
        let per = j.w.rows.div_ceil(unit).div_ceil(parts) * unit;
        let (r0, r1) = (part * per, ((part + 1) * per).min(j.w.rows));
        if r0 < r1 {
            j.w.run_rows(j.acts, j.a0, j.n, r0, r1, at(&j));
        }
    });
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
