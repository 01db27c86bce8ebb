//! Dot-product kernels behind `WeightMatrix`, with the instruction set chosen once at runtime.
//!
//! Contract (batch invariance): `dot_rows` computes each output with an instruction sequence
//! that depends only on the weight row and that token's activation row — never on how many
//! tokens are processed together — so gemm rows are bit-identical to gemv. Integer sums inside
//! a block are exact; only the f32 accumulation order differs from the scalar reference
//! (`quant::dot_row_ref`): SIMD kernels keep per-lane f32 sums and reduce them once per row.

// Kernels index parallel per-lane arrays by lane number.
#![allow(clippy::needless_range_loop)]

use crate::quant::blocks::{BlockQ8K, BlockQ8_0};
use crate::quant::{act, dot_row_ref, GgmlType};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A `[[i16; M]; N]` lookup table built at compile time, entry `[a][b]` = `$e` (a `const fn`
/// cannot take a closure, so the loops are written once here).
#[cfg(target_arch = "x86_64")]
macro_rules! i16_table {
    ($n:expr, $m:expr, |$a:ident, $b:ident| $e:expr) => {{
        let mut t = [[0i16; $m]; $n];
        let mut $a = 0;
        while $a < $n {
            let mut $b = 0;
            while $b < $m {
                t[$a][$b] = $e;
                $b += 1;
            }
            $a += 1;
        }
        t
    }};
}

/// `$go!(k)` with the literal `k` equal to `$n`, among the listed literals, else `$go!($last)`:
/// a runtime count as a constant (a const generic), so that the code it picks keeps its
/// per-count arrays in registers.
#[cfg(target_arch = "x86_64")]
macro_rules! match_const {
    ($n:expr, $go:ident, [$($k:literal),*], $last:literal) => {
        match $n {
            $($k => $go!($k),)*
            _ => $go!($last),
        }
    };
}

mod acts;
mod attn;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_k;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_k;
#[cfg(target_arch = "x86_64")]
mod avx512_q8k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x16;
#[cfg(target_arch = "x86_64")]
mod x16_avx2;
#[cfg(target_arch = "x86_64")]
mod x16_f;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x16_k;

pub mod glu;

pub use acts::ActBuf;
pub use attn::{attend_rows, FlashScratch, RowBlock, TypedKv};

/// The key layout [`attend_rows`] reads fastest for keys of type `ty` in heads `head_dim`
/// wide: tiles of 16 positions where the tiled AVX-512 kernel runs (it multiplies a query
/// element by 16 keys' values at once, which then need no transposition), rows elsewhere and
/// for types that cannot be tiled.
pub fn key_layout(ty: crate::cache::KvType, head_dim: usize) -> crate::cache::RowLayout {
    if isa() == Isa::Avx512 && head_dim.is_multiple_of(16) && ty.tileable() {
        crate::cache::RowLayout::Tiles
    } else {
        crate::cache::RowLayout::Rows
    }
}

/// Instruction sets with kernels. `Neon` slots in beside `Avx2` for aarch64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C (x86-64-v3).
    Avx2,
    /// AVX-512 F/BW/VL/VNNI on top of `Avx2` (types without an AVX-512 kernel run AVX2's).
    Avx512,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::is_x86_feature_detected as has;
                if has!("avx2") && has!("fma") && has!("f16c") {
                    if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vnni")
                    {
                        return Isa::Avx512;
                    }
                    return Isa::Avx2;
                }
            }
            Isa::Scalar
        })
    }

    /// Whether this CPU can run `self` (tests iterate over all supported sets).
    pub fn supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => matches!(Isa::detect(), Isa::Avx2 | Isa::Avx512),
            Isa::Avx512 => Isa::detect() == Isa::Avx512,
        }
    }

    pub fn all() -> &'static [Isa] {
        &[Isa::Scalar, Isa::Avx2, Isa::Avx512]
    }

    /// Rows × tokens that one `dot_block` call should cover for weights of type `ty`.
    pub fn tile(self, ty: GgmlType) -> (usize, usize) {
        match self.kernel(ty) {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => avx512::TILE,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512K => avx512_k::TILE,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Q8K => avx512_q8k::TILE,
            _ => (16, 8),
        }
    }

    /// The kernel `dot_block` runs for weights of type `ty` (tests check the dispatch).
    pub fn kernel(self, ty: GgmlType) -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if self == Isa::Avx512 && avx512::has_kernel(ty) {
                return Kernel::Avx512;
            }
            if self == Isa::Avx512 && avx512_k::has_kernel(ty) {
                return Kernel::Avx512K;
            }
            if self == Isa::Avx512 && avx512_q8k::has_kernel(ty) {
                return Kernel::Avx512Q8K;
            }
            if matches!(self, Isa::Avx2 | Isa::Avx512) && self.has_kernel(ty) {
                return Kernel::Avx2;
            }
        }
        Kernel::Scalar
    }

    /// Whether `ty` has a SIMD kernel on this instruction set (else the scalar reference runs).
    pub fn has_kernel(self, ty: GgmlType) -> bool {
        use GgmlType::*;
        match self {
            Isa::Scalar => false,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => {
                matches!(
                    ty,
                    F32 | F16
                        | BF16
                        | Q4_0
                        | Q4_1
                        | Q5_0
                        | Q5_1
                        | Q8_0
                        | Q4K
                        | Q5K
                        | Q6K
                        | IQ4NL
                        | MXFP4
                ) || avx2_k::has_kernel(ty)
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }
}

/// Kernel families behind `dot_block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `quant::dot_row_ref`.
    Scalar,
    /// `avx2.rs`: every SIMD type.
    Avx2,
    /// `avx512.rs`: Q4_0 / Q5_0 / Q8_0 / IQ4_NL / MXFP4.
    Avx512,
    /// `avx512_k.rs`: Q4_K / Q5_K / Q6_K.
    Avx512K,
    /// `avx512_q8k.rs`: Q2_K, Q3_K, IQ4_XS, IQ1 / IQ2 / IQ3, TQ1_0 / TQ2_0.
    Avx512Q8K,
}

/// Kernel choices an application makes once, before the first product (the `ferrox` CLI
/// reads them from `FERROX_ISA` and `FERROX_X16`). Never configured, the kernels use
/// [`KernelOptions::default`]: the detected instruction set and the interleaved layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOptions {
    /// A lesser instruction set to run instead of the detected one (debugging, benchmarks);
    /// one this CPU lacks falls back to detection.
    pub isa: Option<Isa>,
    /// Repack weights into the interleaved layout where a kernel has one; `false` keeps every
    /// matrix in ggml layout and the row kernels (A/B benchmarks).
    pub x16: bool,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            isa: None,
            x16: true,
        }
    }
}

/// [`configure`] came after the kernels were configured differently or first used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("kernel options are fixed once kernels run: configure them before loading a model")]
pub struct AlreadyConfigured;

/// Options once resolved against this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Config {
    isa: Isa,
    x16: bool,
}

impl Config {
    fn resolve(o: KernelOptions) -> Config {
        let isa = match o.isa {
            Some(isa) if isa.supported() => isa,
            _ => Isa::detect(),
        };
        Config { isa, x16: o.x16 }
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

fn config() -> &'static Config {
    CONFIG.get_or_init(|| Config::resolve(KernelOptions::default()))
}

/// Sets the process-wide kernel options. Call it before anything runs a kernel; once they are
/// fixed (configured, or defaulted by a first use) only the same options are accepted again.
pub fn configure(options: KernelOptions) -> Result<(), AlreadyConfigured> {
    let want = Config::resolve(options);
    if *CONFIG.get_or_init(|| want) == want {
        Ok(())
    } else {
        Err(AlreadyConfigured)
    }
}

/// The process-wide instruction set: detected once, or the lesser one [`configure`] asked for.
pub fn isa() -> Isa {
    config().isa
}

/// `out[k] = dot(w, acts row t0 + k)` for every `k < out.len()`: one weight row.
///
/// `w` is one weight row of type `ty` whose length matches `acts.cols()`; `acts` holds the
/// activation format `ty.act_type()` (callers validate both; a mismatch panics).
pub fn dot_rows(isa: Isa, ty: GgmlType, w: &[u8], acts: &ActBuf, t0: usize, out: &mut [f32]) {
    dot_block(isa, ty, w, acts, t0, out.len(), out)
}

/// `out[r * nt + k] = dot(row r of w, acts row t0 + k)`: several whole weight rows (contiguous)
/// against `nt` tokens. Each output is the same bits whatever the rows / tokens around it.
pub fn dot_block(
    isa: Isa,
    ty: GgmlType,
    w: &[u8],
    acts: &ActBuf,
    t0: usize,
    nt: usize,
    out: &mut [f32],
) {
    assert!(isa.supported(), "instruction set {isa:?} not available");
    let row_bytes = ty
        .row_bytes(acts.cols())
        .expect("activation width fits the type");
    let Some(a) = check_block(ty, row_bytes, w, acts, t0, nt, out) else {
        return;
    };
    match isa.kernel(ty) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C checked by `supported`; shapes
        // checked above; Q8_0 activations carry the pair layout on such a CPU.
        Kernel::Avx512 => unsafe { avx512::dot_block(a, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C checked by `supported`; shapes and
        // the (Q8_K) activation format checked above.
        Kernel::Avx512K => unsafe { avx512_k::dot_block(a, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL and AVX2/FMA/F16C checked by `supported`; shapes and the
        // (Q8_K) activation format checked above.
        Kernel::Avx512Q8K => unsafe { avx512_q8k::dot_block(a, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA/F16C presence checked by `supported`; shapes checked above.
        Kernel::Avx2 => unsafe { avx2::dot_block(a, out) },
        _ => dot_block_ref(ty, w, row_bytes, acts, t0, nt, out),
    }
}

/// The shape checks of a block product: `ty`'s activation format, tokens inside `acts`, `w`
/// whole rows of `row_bytes`, `out` one value per row and token; the checked operands, or
/// `None` when there is nothing to do.
fn check_block<'a>(
    ty: GgmlType,
    row_bytes: usize,
    w: &'a [u8],
    acts: &'a ActBuf,
    t0: usize,
    nt: usize,
    out: &[f32],
) -> Option<BlockArgs<'a>> {
    assert_eq!(ty.act_type(), acts.act_type(), "activation format");
    assert!(t0 + nt <= acts.rows(), "token range");
    assert!(
        row_bytes > 0 && w.len().is_multiple_of(row_bytes),
        "whole weight rows"
    );
    assert_eq!(out.len(), w.len() / row_bytes * nt, "output shape");
    (nt > 0).then_some(BlockArgs {
        ty,
        w,
        acts,
        t0,
        nt,
    })
}

/// The operands of one SIMD kernel call, shapes checked by [`dot_block`] (or [`gemm_x16`]):
/// `w` is whole rows of `ty` matching `acts.cols()` (interleaved for `gemm_x16`), `acts` holds
/// rows `t0..t0 + nt`, and the kernel writes `dot(row r of w, activation row t0 + k)` for each.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct BlockArgs<'a> {
    ty: GgmlType,
    w: &'a [u8],
    acts: &'a ActBuf,
    t0: usize,
    nt: usize,
}

/// Whether weights of type `ty` are repacked into the interleaved layout (`quant::repack`)
/// for this instruction set: only where an interleaved kernel exists.
/// [`KernelOptions::x16`] `false` keeps every matrix in ggml layout (A/B benchmarks).
pub fn interleaves(isa: Isa, ty: GgmlType) -> bool {
    config().x16 && isa.supported() && interleaved_kernel(isa, ty)
}

/// Whether `isa` has a kernel for `ty` in the interleaved layout: AVX-512 for every type with
/// the layout, AVX2 (`x16_avx2`) for the types most GGUFs' large matrices use.
fn interleaved_kernel(isa: Isa, ty: GgmlType) -> bool {
    match isa {
        Isa::Avx512 => crate::quant::repack::has_layout(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x16_avx2::has_kernel(ty),
        _ => false,
    }
}

/// What a matrix of type `ty` is converted to at load for this instruction set
/// (`quant::convert`): only where the AVX-512 kernels read the result, and never with
/// [`KernelOptions::x16`] `false` (which keeps every matrix as the file has it).
pub fn conversion(isa: Isa, ty: GgmlType) -> Option<crate::quant::convert::Conversion> {
    let on = config().x16 && isa == Isa::Avx512 && isa.supported();
    on.then(|| crate::quant::convert::Conversion::of(ty))
        .flatten()
}

/// Bytes the load-time conversions have added so far, and the most they may add.
static CONVERTED: AtomicUsize = AtomicUsize::new(0);
static CONVERT_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Caps the bytes the load-time conversions (`quant::convert`: IQ1 to 2.5 bits a weight,
/// TQ1_0 to TQ2_0) may add to the weights of this process in total (unlimited unless set): a
/// matrix whose conversion would exceed what is left keeps the file's layout, its products
/// the same, only slower. The IQ1 types are what users pick to fit a model in memory, so an
/// application sets this from the memory it has (the `ferrox` CLI: half of what the model
/// file leaves available).
pub fn limit_conversions(bytes: usize) {
    CONVERT_LIMIT.store(bytes, Ordering::SeqCst);
}

/// Takes `extra` bytes from the conversion budget; `false` (nothing taken) when they do not
/// fit what is left.
pub(crate) fn reserve_conversion(extra: usize) -> bool {
    let limit = CONVERT_LIMIT.load(Ordering::SeqCst);
    CONVERTED
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
            used.checked_add(extra).filter(|&n| n <= limit)
        })
        .is_ok()
}

/// [`dot_block`] for weights converted at load into a layout of `quant::convert` (IQ1 to
/// ternary codes, IQ2 / IQ3 to nibbles; the matrix's `conv`): `w` is whole converted rows of
/// `acts.cols()`, against activation rows `t0..t0 + nt`.
pub(crate) fn dot_block_converted(
    isa: Isa,
    ty: GgmlType,
    conv: crate::quant::convert::Conversion,
    w: &[u8],
    (acts, t0, nt): (&ActBuf, usize, usize),
    out: &mut [f32],
) {
    use crate::quant::convert::Conversion;
    assert!(
        conversion(isa, ty) == Some(conv) && conv != Conversion::Tq1ToTq2,
        "no {conv:?} kernel for {ty:?} on {isa:?}"
    );
    let row_bytes = conv.target(ty, acts.cols()).1;
    let Some(a) = check_block(ty, row_bytes, w, acts, t0, nt, out) else {
        return;
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = a;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: AVX-512 F/BW/VL and AVX2/FMA/F16C checked by `conversion`; shapes and the
        // (Q8_K) activation format checked above.
        unsafe { avx512_q8k::dot_block_converted(a, out, conv) }
    }
}

/// Whether attention asked for bf16 products gets them: the tiled AVX-512 kernel with
/// AVX-512 BF16 (`vdpbf16ps`).
pub fn bf16_attention() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        isa() == Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether bf16 attention products are the faster ones here: [`bf16_attention`] on an AMD
/// CPU. Zen 4 issues a 512-bit `vdpbf16ps` (32 multiply-adds) as often as a 512-bit f32 FMA
/// (16), so long prompts' attention gets cheaper (1.5B pp4096 +11% measured); Intel's cores
/// (Sapphire Rapids measured) issue two f32 FMAs per cycle against one `vdpbf16ps`, and the
/// bf16 path's extra rounding made the same prompt ~10% slower there.
pub fn bf16_attention_pays() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `cpuid` leaf 0 exists on every x86-64 CPU; it only reads identification.
        #[allow(unused_unsafe)]
        let id = unsafe { std::arch::x86_64::__cpuid(0) };
        // "AuthenticAMD": "Auth" in ebx, "enti" in edx, "cAMD" in ecx.
        let amd = (id.ebx, id.edx, id.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        amd && bf16_attention()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether interleaved BF16 weights take bf16 activations and `vdpbf16ps` (AVX-512 BF16:
/// twice the multiply-adds of f32 per instruction, as ggml pairs BF16 with bf16).
pub fn bf16_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        interleaves(isa(), GgmlType::BF16) && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Tokens one `gemm_x16` call takes at most.
pub(crate) const X16_MAX_TOKENS: usize = 64;

/// `y[k * ld + g * 16 + i] = dot(row i of group g of w, activation row t0 + k)` for interleaved
/// weights `w` (whole groups of 16 rows) and `k < nt`.
///
/// # Safety
/// `interleaves(isa, ty)` holds, `acts` holds `ty.act_type()` activations for rows
/// `t0..t0 + nt` of `acts.cols()` columns, `nt <= X16_MAX_TOKENS`, and `y` is valid for writes
/// at every index above.
pub(crate) unsafe fn gemm_x16(
    isa: Isa,
    ty: GgmlType,
    w: &[u8],
    (acts, t0, nt): (&ActBuf, usize, usize),
    y: *mut f32,
    ld: usize,
) {
    assert!(interleaves(isa, ty), "no interleaved kernel for {ty:?}");
    let bf16 = ty == GgmlType::BF16 && bf16_dot();
    let act = if bf16 {
        Some(crate::quant::ActType::Bf16)
    } else {
        ty.act_type()
    };
    assert_eq!(act, acts.act_type(), "activation format");
    assert!(
        t0 + nt <= acts.rows() && nt <= X16_MAX_TOKENS,
        "token range"
    );
    let cols = acts.cols();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: AVX2/FMA/F16C checked by `interleaves`; shapes checked here and by the
        // caller.
        unsafe {
            gemm_x16_avx2(
                BlockArgs {
                    ty,
                    w,
                    acts,
                    t0,
                    nt,
                },
                y,
                ld,
            )
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    match ty {
        GgmlType::Q2K
        | GgmlType::Q3K
        | GgmlType::Q4K
        | GgmlType::Q5K
        | GgmlType::Q6K
        | GgmlType::IQ4XS => {
            let nb = cols / crate::quant::blocks::QK_K;
            let a = &acts.q8k[t0 * nb..(t0 + nt) * nb];
            let gemm = match ty {
                GgmlType::Q4K => x16_k::gemm_q4k,
                GgmlType::Q5K => x16_k::gemm_q5k,
                GgmlType::Q2K => x16_k::gemm_q2k,
                GgmlType::Q6K => x16_k::gemm_q6k,
                GgmlType::Q3K => x16_k::gemm_q3k,
                _ => x16_k::gemm_iq4xs,
            };
            // SAFETY: AVX-512 checked by `interleaves`; shapes checked here and by the caller.
            unsafe { gemm(w, cols, a, nt, y, ld) }
        }
        GgmlType::BF16 if bf16 => {
            let x = &acts.bf16[t0 * cols..(t0 + nt) * cols];
            // SAFETY: AVX-512 checked by `interleaves`, AVX-512 BF16 by `bf16_dot`; shapes
            // checked here and by the caller.
            unsafe { x16_f::gemm_bf16(w, cols, x, nt, y, ld) };
        }
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let x = &acts.f32[t0 * cols..(t0 + nt) * cols];
            // SAFETY: AVX-512 checked by `interleaves`; shapes checked here and by the caller.
            unsafe { x16_f::gemm(ty, w, cols, x, nt, y, ld) };
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let nb = cols / 32;
            let a = x16::Acts {
                q: &acts.q8_1[t0 * nb..(t0 + nt) * nb],
                d: &acts.d8[t0 * nb..(t0 + nt) * nb],
                sum: &[],
                s: &acts.s8[t0 * nb..(t0 + nt) * nb],
            };
            // SAFETY: AVX-512 checked by `interleaves`; shapes checked here and by the caller.
            unsafe { x16::gemm(ty, w, cols, &a, nt, y, ld) };
        }
        _ => {
            let a = q8_0_acts(acts, t0, nt);
            // SAFETY: AVX-512 checked by `interleaves`; shapes checked here and by the caller.
            unsafe { x16::gemm(ty, w, cols, &a, nt, y, ld) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("interleaves() is false off x86-64: {cols} {y:?} {ld} {w:?}");
}

/// The Q8_0 activation rows `t0..t0 + nt` of `acts` as the interleaved kernels read them.
#[cfg(target_arch = "x86_64")]
fn q8_0_acts(acts: &ActBuf, t0: usize, nt: usize) -> x16::Acts<'_, BlockQ8_0> {
    let nb = acts.cols() / 32;
    let r = t0 * nb..(t0 + nt) * nb;
    x16::Acts {
        q: &acts.q8_0[r.clone()],
        d: &acts.d8[r.clone()],
        sum: &acts.sum8[r],
        s: &[],
    }
}

/// [`gemm_x16`] on an AVX2 CPU (`x16_avx2`).
///
/// # Safety
/// As [`gemm_x16`], with `isa` AVX2 and `x16_avx2::has_kernel(ty)`.
#[cfg(target_arch = "x86_64")]
unsafe fn gemm_x16_avx2(a: BlockArgs<'_>, y: *mut f32, ld: usize) {
    let BlockArgs {
        ty,
        w,
        acts,
        t0,
        nt,
    } = a;
    let cols = acts.cols();
    match ty {
        GgmlType::Q4K | GgmlType::Q6K => {
            let nb = cols / crate::quant::blocks::QK_K;
            let a = &acts.q8k[t0 * nb..(t0 + nt) * nb];
            let gemm = if ty == GgmlType::Q4K {
                x16_avx2::gemm_q4k
            } else {
                x16_avx2::gemm_q6k
            };
            // SAFETY: per the caller.
            unsafe { gemm(w, cols, a, nt, y, ld) }
        }
        _ => {
            let a = q8_0_acts(acts, t0, nt);
            // SAFETY: per the caller.
            unsafe { x16_avx2::gemm_q4_0(ty, w, cols, &a, nt, y, ld) }
        }
    }
}

/// The scalar reference for `dot_block`.
fn dot_block_ref(
    ty: GgmlType,
    w: &[u8],
    row_bytes: usize,
    acts: &ActBuf,
    t0: usize,
    nt: usize,
    out: &mut [f32],
) {
    for (r, wr) in w.chunks_exact(row_bytes).enumerate() {
        for k in 0..nt {
            out[r * nt + k] = dot_row_ref(ty, wr, acts.row(t0 + k)).expect("validated shapes");
        }
    }
}

/// Convenience for tests and one-off products: quantizes `x` for `ty` and dots it with `w`.
pub fn dot_f32(isa: Isa, ty: GgmlType, w: &[u8], x: &[f32]) -> f32 {
    let mut acts = ActBuf::default();
    acts.quantize(ty.act_type().expect("type has a dot product"), x, x.len());
    let mut out = [0f32];
    dot_rows(isa, ty, w, &acts, 0, &mut out);
    out[0]
}

/// The AVX2 kernel `$simd` where `isa` allows it and the CPU has it, else the scalar
/// reference `$scalar` (the same bits); the caller checks the operands' lengths.
macro_rules! avx2_or_scalar {
    ($isa:expr, $simd:path, $scalar:path, $($arg:expr),*) => {{
        #[cfg(target_arch = "x86_64")]
        if $isa != Isa::Scalar && $isa.supported() {
            // SAFETY: AVX2/FMA/F16C presence checked by `supported`; lengths by the caller.
            return unsafe { $simd($($arg),*) };
        }
        let _ = $isa;
        $scalar($($arg),*)
    }};
}

/// Q8_0 activation quantization, bit-identical to `quant::act::quantize_row_q8_0`.
pub fn quantize_row_q8_0(isa: Isa, x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), out.len() * 32, "quantize_row_q8_0: length");
    avx2_or_scalar!(isa, avx2::quantize_row_q8_0, act::quantize_row_q8_0, x, out)
}

/// Q8_K activation quantization, bit-identical to `quant::act::quantize_row_q8_k`.
pub fn quantize_row_q8_k(isa: Isa, x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(
        x.len(),
        out.len() * crate::quant::blocks::QK_K,
        "quantize_row_q8_k: length"
    );
    avx2_or_scalar!(isa, avx2::quantize_row_q8_k, act::quantize_row_q8_k, x, out)
}

/// Σ a[i]·b[i] over f32 slices of equal length (attention scores). The summation order
/// depends only on the length, never on the caller's batch.
pub fn f32_dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "f32_dot: lengths");
    #[cfg(target_arch = "x86_64")]
    if isa() != Isa::Scalar {
        // SAFETY: `isa()` only reports Avx2/Avx512 when the CPU has AVX2/FMA/F16C; lengths equal.
        return unsafe { avx2::f32_dot(a, b) };
    }
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]);
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

/// How attention scores become weights: `q·k·scale`, then `cap·tanh(s/cap)` with a soft cap
/// (Gemma 2), and a softmax whose denominator also counts `exp(sink)` when the head has a
/// learned sink logit (gpt-oss: attention may go "nowhere"; the sink takes no value).
#[derive(Clone, Copy, Debug)]
pub struct Scoring<'a> {
    pub scale: f32,
    pub softcap: Option<f32>,
    /// One logit per query head of the group, or none.
    pub sinks: Option<&'a [f32]>,
    /// Products in bf16 where the CPU has them ([`bf16_attention`]): queries, keys, weights
    /// and values rounded to bf16, pairs summed into f32 — twice the multiply-adds per
    /// instruction. Elsewhere, and when false, every product is f32.
    pub bf16: bool,
}

impl Scoring<'_> {
    /// Plain scaled dot-product softmax.
    pub fn scaled(scale: f32) -> Scoring<'static> {
        Scoring {
            scale,
            softcap: None,
            sinks: None,
            bf16: false,
        }
    }

    /// This head's sink, when the group has them.
    fn sink(&self, h: usize) -> Option<f32> {
        self.sinks.map(|s| s[h])
    }
}

/// One query head's view of the KV cache: key and value rows of `stride` floats, this head's
/// `dim` columns starting at `col`.
#[derive(Clone, Copy)]
pub struct HeadKv<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub stride: usize,
    pub col: usize,
    pub dim: usize,
}

/// Softmax attention of the `g = q.len() / dim` query heads that share this KV head over cached
/// positions `start..start + len` (`q`, `out`: `g × dim`; `scores`: `g × len`, one row per
/// head): scores `q·k·scale` (then `cap·tanh(s/cap)` with a soft cap), a two-pass softmax in
/// key order, and `out = Σ p_j v_j` accumulated in key order. Each head's arithmetic depends
/// only on its query and these keys — not on `g` or the batch (batch invariance). The path of
/// [`attend_rows`] where the tiled AVX-512 kernel does not apply.
pub fn attend_group(
    q: &[f32],
    kv: HeadKv<'_>,
    start: usize,
    how: Scoring<'_>,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let d = kv.dim;
    assert!(
        d > 0 && q.len().is_multiple_of(d),
        "attend_group: head width"
    );
    let g = q.len() / d;
    assert!(g > 0 && out.len() == q.len(), "attend_group: output width");
    assert!(scores.len().is_multiple_of(g), "attend_group: score rows");
    let len = scores.len() / g;
    assert!(kv.col + d <= kv.stride, "attend_group: head columns");
    assert!(
        how.sinks.is_none_or(|s| s.len() == g),
        "attend_group: one sink per head"
    );
    let end = (start + len) * kv.stride;
    assert!(
        len == 0 || (kv.keys.len() >= end && kv.values.len() >= end),
        "attend_group: cache rows"
    );
    for (h, ((qh, sc), o)) in q
        .chunks_exact(d)
        .zip(scores.chunks_exact_mut(len))
        .zip(out.chunks_exact_mut(d))
        .enumerate()
    {
        head(qh, kv, start, how.scale, how.softcap, how.sink(h), sc, o);
    }
}

/// Scores in place → unnormalised exp(s − max) (after the soft cap); returns 1 / Σ, where Σ
/// also counts the sink's exp(sink − max) (the max taken over the sink too).
fn softmax(scores: &mut [f32], softcap: Option<f32>, sink: Option<f32>) -> f32 {
    let mut max = f32::NEG_INFINITY;
    for sv in scores.iter_mut() {
        if let Some(cap) = softcap {
            *sv = cap * (*sv / cap).tanh();
        }
        max = max.max(*sv);
    }
    if let Some(s) = sink {
        max = max.max(s);
    }
    let mut sum = 0f32;
    for sv in scores.iter_mut() {
        *sv = (*sv - max).exp();
        sum += *sv;
    }
    if let Some(s) = sink {
        sum += (s - max).exp();
    }
    1.0 / sum
}

/// One head without AVX-512 (shapes checked by `attend_group`).
#[allow(clippy::too_many_arguments)]
fn head(
    q: &[f32],
    kv: HeadKv<'_>,
    start: usize,
    scale: f32,
    softcap: Option<f32>,
    sink: Option<f32>,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let d = kv.dim;
    let row = |j: usize| (start + j) * kv.stride + kv.col;
    #[cfg(target_arch = "x86_64")]
    let simd = isa() != Isa::Scalar;
    #[cfg(not(target_arch = "x86_64"))]
    let simd = false;
    if simd {
        // SAFETY: `isa()` reports AVX2/FMA only when present; rows checked by the caller.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            avx2::scores(q, kv, start, scale, scores)
        };
    } else {
        for (j, sv) in scores.iter_mut().enumerate() {
            *sv = f32_dot(q, &kv.keys[row(j)..row(j) + d]) * scale;
        }
    }
    let inv = softmax(scores, softcap, sink);
    if simd {
        // SAFETY: `isa()` reports AVX2/FMA only when present; rows checked by the caller.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            avx2::weighted_sum(scores, inv, kv, start, out)
        };
        return;
    }
    out.fill(0.0);
    for (j, &sv) in scores.iter().enumerate() {
        f32_axpy(out, sv * inv, &kv.values[row(j)..row(j) + d]);
    }
}

/// y[i] += alpha · x[i] (attention's weighted sum of values).
pub fn f32_axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len(), "f32_axpy: lengths");
    #[cfg(target_arch = "x86_64")]
    if isa() != Isa::Scalar {
        // SAFETY: as in `f32_dot`.
        unsafe { avx2::f32_axpy(y, alpha, x) };
        return;
    }
    y.iter_mut().zip(x).for_each(|(a, &b)| *a += alpha * b);
}
