//! GGUF writing (version 3, the layout [`GgufFile`](super::GgufFile) reads): metadata values
//! and tensors in, file bytes out. For tests and fuzz seeds that need a model file with one
//! value changed: read a valid file, edit its metadata, write it back.

use super::meta::{MetaArray, MetaValue};
use super::GgufFile;
use ferrox_core::quant::GgmlType;

/// One tensor to write: ggml dims (innermost first) and its stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorOut {
    pub name: String,
    pub ty: GgmlType,
    pub dims: Vec<u64>,
    pub data: Vec<u8>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    out.extend_from_slice(&(v.meta_type() as u32).to_le_bytes());
    put_payload(out, v);
}

/// A value without its type id (array elements carry none).
fn put_payload(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        MetaArray::String(s) => s.iter().for_each(|x| put_str(out, x)),
        MetaArray::Array(v) => v.iter().for_each(|x| put_array(out, x)),
        other => other.iter().for_each(|x| put_payload(out, &x)),
    }
}

/// The bytes of a GGUF v3 file holding `metadata` (in order) and `tensors`, each tensor's data
/// aligned to `general.alignment` (32 when absent or not a power-of-two u32).
pub fn to_bytes(metadata: &[(String, MetaValue)], tensors: &[TensorOut]) -> Vec<u8> {
    let align = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        Some((_, MetaValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
        _ => 32,
    };
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut out, k);
        put_value(&mut out, v);
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        t.dims
            .iter()
            .for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
        out.extend_from_slice(&(t.ty as u32).to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + t.data.len() as u64).next_multiple_of(align);
    }
    for t in tensors {
        out.resize((out.len() as u64).next_multiple_of(align) as usize, 0);
        out.extend_from_slice(&t.data);
    }
    out
}

impl GgufFile {
    /// Every tensor of the file as [`TensorOut`]s (data copied), for writing back.
    pub fn tensors_out(&self) -> Vec<TensorOut> {
        self.tensors()
            .iter()
            .map(|t| TensorOut {
                name: t.name.clone(),
                ty: t.ty,
                dims: t.dims.clone(),
                data: self.tensor_data(t).as_ref().to_vec(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrox_core::storage::Bytes;

    #[test]
    fn written_files_read_back() {
        let strs = ["a", "bc"].into_iter().collect();
        let meta = vec![
            (
                "general.architecture".to_string(),
                MetaValue::String("x".into()),
            ),
            ("x.n".to_string(), MetaValue::U32(7)),
            ("x.f".to_string(), MetaValue::F64(0.5)),
            ("x.b".to_string(), MetaValue::Bool(true)),
            ("x.s".to_string(), MetaValue::Array(MetaArray::String(strs))),
            (
                "x.nest".to_string(),
                MetaValue::Array(MetaArray::Array(vec![MetaArray::I32(vec![-1, 2])])),
            ),
        ];
        let tensors = vec![
            TensorOut {
                name: "t0".into(),
                ty: GgmlType::F32,
                dims: vec![3],
                data: [1f32, 2., 3.]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            },
            TensorOut {
                name: "t1".into(),
                ty: GgmlType::F16,
                dims: vec![2, 2],
                data: vec![0; 8],
            },
        ];
        let bytes = to_bytes(&meta, &tensors);
        let f = GgufFile::from_bytes(Bytes::from_vec(bytes)).unwrap();
        assert_eq!(f.metadata(), &meta[..]);
        assert_eq!(f.tensors_out(), tensors);
    }
}
