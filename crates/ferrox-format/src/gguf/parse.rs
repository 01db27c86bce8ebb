//! The byte-level GGUF reader. Every length and count is checked against the bytes that remain
//! before anything is allocated for it, with overflow-safe arithmetic; no capacity is ever
//! taken from the file without that bound.

use super::error::{GgufError, Problem, TensorProblem};
use super::meta::{MetaArray, MetaType, MetaValue, StrArray};
use super::TensorInfo;
use ferrox_core::quant::GgmlType;
use std::borrow::Cow;

pub(crate) const MAGIC: &[u8; 4] = b"GGUF";
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// Real files never nest arrays; the bound keeps a crafted file from exhausting the stack.
const MAX_DEPTH: usize = 8;
/// Fewest bytes of one metadata entry: key length, value type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes of one tensor info: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_start: u64,
}

/// A failure inside one section; the caller names the section.
struct Fail {
    offset: u64,
    problem: Problem,
}

type R<T> = Result<T, Fail>;

impl Fail {
    fn into_err(self, section: impl FnOnce() -> String) -> GgufError {
        GgufError::Malformed {
            section: section(),
            offset: self.offset,
            problem: self.problem,
        }
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Strings replaced lossily since the last reset (reported per key).
    invalid_utf8: u64,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn fail(&self, problem: Problem) -> Fail {
        Fail {
            offset: self.pos as u64,
            problem,
        }
    }

    fn take(&mut self, n: u64) -> R<&'a [u8]> {
        if n > self.left() {
            return Err(self.fail(Problem::Truncated {
                need: n,
                left: self.left(),
            }));
        }
        let n = n as usize; // n <= left, which is a usize
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        let s = self.take(N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self) -> R<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> R<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// Fails, without consuming, unless `count` items of at least `min_each` bytes fit.
    fn check_fits(&self, what: &'static str, count: u64, min_each: u64) -> R<()> {
        match count.checked_mul(min_each) {
            Some(n) if n <= self.left() => Ok(()),
            _ => Err(self.fail(Problem::TooLarge {
                what,
                count,
                left: self.left(),
            })),
        }
    }

    fn string_bytes(&mut self) -> R<&'a [u8]> {
        let start = self.pos;
        let len = self.u64()?;
        if len > self.left() {
            let left = self.left();
            self.pos = start;
            return Err(self.fail(Problem::TooLarge {
                what: "string length",
                count: len,
                left,
            }));
        }
        self.take(len)
    }

    /// GGUF strings are UTF-8 by spec; the rare invalid one is decoded lossily (U+FFFD) and
    /// counted so the caller can warn naming the key, rather than refusing the whole model.
    fn string(&mut self) -> R<Cow<'a, str>> {
        let b = self.string_bytes()?;
        Ok(match std::str::from_utf8(b) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => {
                self.invalid_utf8 += 1;
                String::from_utf8_lossy(b)
            }
        })
    }

    fn value_type(&mut self) -> R<MetaType> {
        let at = self.pos as u64;
        let id = self.u32()?;
        MetaType::from_id(id).ok_or(Fail {
            offset: at,
            problem: Problem::UnknownValueType(id),
        })
    }

    fn value(&mut self, ty: MetaType) -> R<MetaValue> {
        Ok(match ty {
            MetaType::U8 => MetaValue::U8(self.array::<1>()?[0]),
            MetaType::I8 => MetaValue::I8(i8::from_le_bytes(self.array()?)),
            MetaType::U16 => MetaValue::U16(u16::from_le_bytes(self.array()?)),
            MetaType::I16 => MetaValue::I16(i16::from_le_bytes(self.array()?)),
            MetaType::U32 => MetaValue::U32(self.u32()?),
            MetaType::I32 => MetaValue::I32(i32::from_le_bytes(self.array()?)),
            MetaType::U64 => MetaValue::U64(self.u64()?),
            MetaType::I64 => MetaValue::I64(i64::from_le_bytes(self.array()?)),
            MetaType::F32 => MetaValue::F32(f32::from_le_bytes(self.array()?)),
            MetaType::F64 => MetaValue::F64(f64::from_le_bytes(self.array()?)),
            MetaType::Bool => MetaValue::Bool(self.array::<1>()?[0] != 0),
            MetaType::String => MetaValue::String(self.string()?.into_owned()),
            MetaType::Array => MetaValue::Array(self.meta_array(1)?),
        })
    }

    fn meta_array(&mut self, depth: usize) -> R<MetaArray> {
        if depth > MAX_DEPTH {
            return Err(self.fail(Problem::TooDeep(MAX_DEPTH)));
        }
        let ty = self.value_type()?;
        let n = self.u64()?;
        self.check_fits("array length", n, ty.min_encoded_len())?;
        // From here `n` elements of fixed size are known to be present, so `n` and `n * size`
        // are at most the bytes left (which fit in usize).
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let b = self.take(n * W as u64)?;
                MetaArray::$variant(
                    b.chunks_exact(W)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk width")))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            MetaType::U8 => MetaArray::U8(self.take(n)?.to_vec()),
            MetaType::I8 => fixed!(I8, i8),
            MetaType::U16 => fixed!(U16, u16),
            MetaType::I16 => fixed!(I16, i16),
            MetaType::U32 => fixed!(U32, u32),
            MetaType::I32 => fixed!(I32, i32),
            MetaType::U64 => fixed!(U64, u64),
            MetaType::I64 => fixed!(I64, i64),
            MetaType::F32 => fixed!(F32, f32),
            MetaType::F64 => fixed!(F64, f64),
            MetaType::Bool => MetaArray::Bool(self.take(n)?.iter().map(|&b| b != 0).collect()),
            MetaType::String => MetaArray::String(self.str_array(n)?),
            MetaType::Array => {
                // A nested array is bigger in memory than its 12-byte minimum in the file:
                // reserve only what the remaining bytes could pay for, and grow honestly.
                let cap = bounded_capacity::<MetaArray>(n, self.left());
                let mut v = Vec::with_capacity(cap);
                for _ in 0..n {
                    v.push(self.meta_array(depth + 1)?);
                }
                MetaArray::Array(v)
            }
        })
    }

    /// Two passes: the first walks the lengths (no allocation) so the text buffer is reserved
    /// exactly and a lying length fails before anything is allocated.
    fn str_array(&mut self, n: u64) -> R<StrArray> {
        let start = self.pos;
        let mut text = 0u64;
        for _ in 0..n {
            text += self.string_bytes()?.len() as u64;
        }
        self.pos = start;
        let mut out = StrArray::with_capacity(n as usize, text as usize);
        for _ in 0..n {
            let s = self.string()?;
            out.push(&s);
        }
        Ok(out)
    }
}

/// Capacity for `count` items of `T` that never exceeds what `left` bytes of memory could hold.
fn bounded_capacity<T>(count: u64, left: u64) -> usize {
    let fit = left / std::mem::size_of::<T>().max(1) as u64;
    count.min(fit) as usize
}

fn lossy_warn(c: &mut Cursor<'_>, what: &str) {
    if c.invalid_utf8 > 0 {
        tracing::warn!(
            "GGUF {what}: {} string(s) are not valid UTF-8; invalid bytes replaced with U+FFFD",
            c.invalid_utf8
        );
        c.invalid_utf8 = 0;
    }
}

struct RawTensor {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    offset: u64,
}

pub(crate) fn parse(buf: &[u8], shard: usize) -> Result<Parsed, GgufError> {
    let mut c = Cursor {
        buf,
        pos: 0,
        invalid_utf8: 0,
    };
    let (version, n_tensors, n_kv) = read_header(&mut c)?;
    let metadata = read_metadata(&mut c, n_kv)?;
    let raw = read_tensor_infos(&mut c, n_tensors)?;
    let alignment = alignment_of(&metadata)?;
    let info_end = c.pos as u64;
    let data_start = info_end.next_multiple_of(alignment);
    let file_len = buf.len() as u64;

    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        let info = validate_tensor(t, shard, alignment, data_start, file_len)?;
        tensors.push(info);
    }
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}

/// Magic, version and the two counts, each count checked against the bytes left.
fn read_header(c: &mut Cursor<'_>) -> Result<(u32, u64, u64), GgufError> {
    let header = || "header".to_string();
    let magic: [u8; 4] = c.array().map_err(|f| f.into_err(header))?;
    if &magic != MAGIC {
        return Err(GgufError::BadMagic {
            found: magic.escape_ascii().to_string(),
        });
    }
    let version = c.u32().map_err(|f| f.into_err(header))?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion(version));
    }
    let n_tensors = c.u64().map_err(|f| f.into_err(header))?;
    let n_kv = c.u64().map_err(|f| f.into_err(header))?;
    c.check_fits("tensor count", n_tensors, MIN_TENSOR_INFO_BYTES)
        .map_err(|f| f.into_err(header))?;
    c.check_fits("metadata entry count", n_kv, MIN_KV_BYTES)
        .map_err(|f| f.into_err(header))?;
    // Both counts together must fit too (each alone already does, so this cannot overflow).
    c.check_fits(
        "tensor + metadata count",
        1,
        n_tensors * MIN_TENSOR_INFO_BYTES + n_kv * MIN_KV_BYTES,
    )
    .map_err(|f| f.into_err(header))?;
    Ok((version, n_tensors, n_kv))
}

fn read_metadata(c: &mut Cursor<'_>, n_kv: u64) -> Result<Vec<(String, MetaValue)>, GgufError> {
    let mut metadata: Vec<(String, MetaValue)> =
        Vec::with_capacity(bounded_capacity::<(String, MetaValue)>(n_kv, c.left()));
    for i in 0..n_kv {
        let key = c
            .string()
            .map_err(|f| f.into_err(|| format!("metadata entry #{i} (key)")))?
            .into_owned();
        let value = c
            .value_type()
            .and_then(|ty| c.value(ty))
            .map_err(|f| f.into_err(|| format!("metadata key {key:?}")))?;
        lossy_warn(c, &format!("metadata key {key:?}"));
        metadata.push((key, value));
    }
    Ok(metadata)
}

fn read_tensor_infos(c: &mut Cursor<'_>, n_tensors: u64) -> Result<Vec<RawTensor>, GgufError> {
    let mut raw: Vec<RawTensor> =
        Vec::with_capacity(bounded_capacity::<RawTensor>(n_tensors, c.left()));
    for i in 0..n_tensors {
        let name = c
            .string()
            .map_err(|f| f.into_err(|| format!("tensor info #{i} (name)")))?
            .into_owned();
        lossy_warn(c, &format!("tensor info #{i} name"));
        let t = (|| {
            let n_dims = c.u32()?;
            if n_dims > MAX_DIMS {
                c.pos -= 4;
                return Err(c.fail(Problem::TooManyDims(n_dims)));
            }
            let dims = c
                .take(u64::from(n_dims) * 8)?
                .chunks_exact(8)
                .map(|d| u64::from_le_bytes(d.try_into().expect("8 bytes")))
                .collect();
            let type_id = c.u32()?;
            let offset = c.u64()?;
            Ok((dims, type_id, offset))
        })()
        .map_err(|f| f.into_err(|| format!("tensor info {name:?}")))?;
        raw.push(RawTensor {
            name,
            dims: t.0,
            type_id: t.1,
            offset: t.2,
        });
    }
    Ok(raw)
}

/// `general.alignment` if present (a nonzero power of two uint32), else the default.
fn alignment_of(metadata: &[(String, MetaValue)]) -> Result<u64, GgufError> {
    Ok(
        match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, MetaValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
            Some((k, v)) => {
                return Err(GgufError::BadMetadata {
                    key: k.clone(),
                    problem: format!("must be a nonzero power of two uint32, found {v:?}"),
                })
            }
        },
    )
}

fn validate_tensor(
    t: RawTensor,
    shard: usize,
    align: u64,
    data_start: u64,
    file_len: u64,
) -> Result<TensorInfo, GgufError> {
    let bad = |name: &str, problem| GgufError::BadTensor {
        name: name.to_string(),
        problem,
    };
    let ty = GgmlType::from_id(t.type_id)
        .map_err(|_| bad(&t.name, TensorProblem::UnknownType(t.type_id)))?;
    let mut n_elements = 1u64;
    for (index, &d) in t.dims.iter().enumerate() {
        if d > i64::MAX as u64 {
            return Err(bad(&t.name, TensorProblem::DimTooLarge { index, value: d }));
        }
        n_elements = n_elements
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(&t.name, TensorProblem::DimsOverflow(t.dims.clone())))?;
    }
    let (block, type_size) = ty.block_layout();
    let cols = t.dims.first().copied().unwrap_or(1);
    if !cols.is_multiple_of(block as u64) {
        return Err(bad(
            &t.name,
            TensorProblem::NotBlockMultiple {
                ty: ty.name(),
                cols,
                block,
            },
        ));
    }
    let n_bytes = (n_elements / block as u64)
        .checked_mul(type_size as u64)
        .ok_or_else(|| bad(&t.name, TensorProblem::SizeOverflow(t.dims.clone())))?;
    if !t.offset.is_multiple_of(align) {
        return Err(bad(
            &t.name,
            TensorProblem::Misaligned {
                offset: t.offset,
                align,
            },
        ));
    }
    let file_offset = data_start
        .checked_add(t.offset)
        .filter(|s| s.checked_add(n_bytes).is_some_and(|e| e <= file_len))
        .ok_or_else(|| {
            bad(
                &t.name,
                TensorProblem::OutOfFile {
                    offset: t.offset,
                    n_bytes,
                    data_start,
                    file_len,
                },
            )
        })?;
    Ok(TensorInfo {
        name: t.name,
        ty,
        dims: t.dims,
        n_elements,
        n_bytes,
        shard,
        offset: t.offset,
        file_offset,
    })
}
