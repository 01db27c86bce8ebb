//! A tiny GGUF writer for tests and fuzz seeds. It records where every section and field starts
//! so tests can truncate at boundaries and corrupt named fields.
#![allow(dead_code)]

/// Value type ids without a number payload (GGUF spec, "Metadata value types").
pub const T_BOOL: u32 = 7;
pub const T_STRING: u32 = 8;
pub const T_ARRAY: u32 = 9;

/// An encoded metadata value: its type id and payload bytes.
#[derive(Clone)]
pub struct Val(pub u32, pub Vec<u8>);

pub fn str_bytes(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

/// For each little-endian number type its type id `T_*` (GGUF spec) and
/// `pub fn name(x: ty) -> Val`.
macro_rules! le_values {
    ($($name:ident($ty:ty) => $id:ident = $n:literal),* $(,)?) => {
        $(pub const $id: u32 = $n;
        pub fn $name(x: $ty) -> Val {
            Val($id, x.to_le_bytes().to_vec())
        })*
    };
}
le_values!(
    v_u8(u8) => T_U8 = 0,
    v_i8(i8) => T_I8 = 1,
    v_u16(u16) => T_U16 = 2,
    v_i16(i16) => T_I16 = 3,
    v_u32(u32) => T_U32 = 4,
    v_i32(i32) => T_I32 = 5,
    v_f32(f32) => T_F32 = 6,
    v_u64(u64) => T_U64 = 10,
    v_i64(i64) => T_I64 = 11,
    v_f64(f64) => T_F64 = 12,
);
pub fn v_bool(x: bool) -> Val {
    Val(T_BOOL, vec![x as u8])
}
pub fn v_str(s: &str) -> Val {
    Val(T_STRING, str_bytes(s.as_bytes()))
}
/// An array of same-typed values (nested arrays: pass array `Val`s).
pub fn v_arr(elem: u32, items: &[Val]) -> Val {
    let mut b = elem.to_le_bytes().to_vec();
    b.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for it in items {
        assert_eq!(it.0, elem, "array elements must share a type");
        b.extend_from_slice(&it.1);
    }
    Val(T_ARRAY, b)
}

pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: u32,
    pub data: Vec<u8>,
}

pub struct Writer {
    pub version: u32,
    pub alignment: u64,
    pub kvs: Vec<(String, Val)>,
    pub tensors: Vec<Tensor>,
}

/// A written file with the offset of every section boundary and named field.
pub struct Built {
    pub bytes: Vec<u8>,
    /// (label, offset) of each point where one section or item ends and the next begins.
    pub boundaries: Vec<(String, usize)>,
    /// (label, offset) of named fields: "n_tensors", "n_kv", "kv:KEY:key_len", "kv:KEY:type",
    /// "kv:KEY:value", "t:NAME:name_len", "t:NAME:n_dims", "t:NAME:dims", "t:NAME:type",
    /// "t:NAME:offset", "data".
    pub fields: Vec<(String, usize)>,
}

impl Built {
    pub fn field(&self, label: &str) -> usize {
        self.fields
            .iter()
            .find(|(l, _)| l == label)
            .unwrap_or_else(|| panic!("no field {label}"))
            .1
    }

    /// A copy with `bytes` written at `field + delta`.
    pub fn patched(&self, label: &str, delta: usize, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.bytes.clone();
        let at = self.field(label) + delta;
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    }
}

impl Writer {
    pub fn new() -> Self {
        Writer {
            version: 3,
            alignment: 32,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }

    pub fn kv(mut self, key: &str, v: Val) -> Self {
        self.kvs.push((key.to_string(), v));
        self
    }

    pub fn tensor(mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) -> Self {
        self.tensors.push(Tensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            ty,
            data,
        });
        self
    }

    /// An F32 tensor filled with 0, 1, 2, ...
    pub fn f32_tensor(self, name: &str, dims: &[u64]) -> Self {
        let n: u64 = dims.iter().product();
        let data = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        self.tensor(name, dims, 0, data)
    }

    pub fn build(&self) -> Built {
        let mut b = Vec::new();
        let mut bounds = Vec::new();
        let mut fields = Vec::new();
        let mark = |v: &mut Vec<(String, usize)>, l: String, at: usize| v.push((l, at));
        b.extend_from_slice(b"GGUF");
        mark(&mut bounds, "magic".into(), b.len());
        b.extend_from_slice(&self.version.to_le_bytes());
        mark(&mut bounds, "version".into(), b.len());
        mark(&mut fields, "n_tensors".into(), b.len());
        b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        mark(&mut bounds, "n_tensors".into(), b.len());
        mark(&mut fields, "n_kv".into(), b.len());
        b.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        mark(&mut bounds, "n_kv".into(), b.len());
        for (k, v) in &self.kvs {
            mark(&mut fields, format!("kv:{k}:key_len"), b.len());
            b.extend_from_slice(&str_bytes(k.as_bytes()));
            mark(&mut bounds, format!("kv:{k}:key"), b.len());
            mark(&mut fields, format!("kv:{k}:type"), b.len());
            b.extend_from_slice(&v.0.to_le_bytes());
            mark(&mut bounds, format!("kv:{k}:type"), b.len());
            mark(&mut fields, format!("kv:{k}:value"), b.len());
            b.extend_from_slice(&v.1);
            mark(&mut bounds, format!("kv:{k}:value"), b.len());
        }
        let mut offsets = Vec::new();
        let mut off = 0u64;
        for t in &self.tensors {
            off = off.next_multiple_of(self.alignment);
            offsets.push(off);
            off += t.data.len() as u64;
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            let n = &t.name;
            mark(&mut fields, format!("t:{n}:name_len"), b.len());
            b.extend_from_slice(&str_bytes(n.as_bytes()));
            mark(&mut bounds, format!("t:{n}:name"), b.len());
            mark(&mut fields, format!("t:{n}:n_dims"), b.len());
            b.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            mark(&mut bounds, format!("t:{n}:n_dims"), b.len());
            mark(&mut fields, format!("t:{n}:dims"), b.len());
            for d in &t.dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            mark(&mut bounds, format!("t:{n}:dims"), b.len());
            mark(&mut fields, format!("t:{n}:type"), b.len());
            b.extend_from_slice(&t.ty.to_le_bytes());
            mark(&mut bounds, format!("t:{n}:type"), b.len());
            mark(&mut fields, format!("t:{n}:offset"), b.len());
            b.extend_from_slice(&off.to_le_bytes());
            mark(&mut bounds, format!("t:{n}:offset"), b.len());
        }
        let data_start = (b.len() as u64).next_multiple_of(self.alignment) as usize;
        b.resize(data_start, 0);
        mark(&mut bounds, "padding".into(), b.len());
        mark(&mut fields, "data".into(), b.len());
        for (t, off) in self.tensors.iter().zip(&offsets) {
            b.resize(data_start + *off as usize, 0);
            b.extend_from_slice(&t.data);
            mark(&mut bounds, format!("data:{}", t.name), b.len());
        }
        Built {
            bytes: b,
            boundaries: bounds,
            fields,
        }
    }
}

/// The reference synthetic model: every value type, nested arrays, a vocabulary, and tensors of
/// several shapes (data dominates the size, as in real files).
pub fn sample() -> Writer {
    let toks: Vec<Val> = ["<pad>", "<s>", "</s>", "hello", " world", "é", "日本", ""]
        .iter()
        .map(|s| v_str(s))
        .collect();
    Writer::new()
        .kv("general.architecture", v_str("llama"))
        .kv("general.name", v_str("tiny"))
        .kv("general.alignment", v_u32(32))
        .kv("t.u8", v_u8(200))
        .kv("t.i8", v_i8(-5))
        .kv("t.u16", v_u16(60000))
        .kv("t.i16", v_i16(-30000))
        .kv("t.u32", v_u32(4_000_000_000))
        .kv("t.i32", v_i32(-7))
        .kv("t.u64", v_u64(1 << 40))
        .kv("t.i64", v_i64(-(1 << 40)))
        .kv("t.f32", v_f32(0.5))
        .kv("t.f64", v_f64(-0.25))
        .kv("t.bool", v_bool(true))
        .kv("tokenizer.ggml.tokens", v_arr(T_STRING, &toks))
        .kv(
            "tokenizer.ggml.scores",
            v_arr(
                T_F32,
                &(0..8).map(|i| v_f32(-(i as f32))).collect::<Vec<_>>(),
            ),
        )
        .kv(
            "tokenizer.ggml.token_type",
            v_arr(T_I32, &(0..8).map(|i| v_i32(i % 3)).collect::<Vec<_>>()),
        )
        .kv("t.bools", v_arr(T_BOOL, &[v_bool(true), v_bool(false)]))
        .kv(
            "t.nested",
            v_arr(
                T_ARRAY,
                &[
                    v_arr(T_U16, &[v_u16(1), v_u16(2)]),
                    v_arr(T_U16, &[]),
                    v_arr(T_U16, &[v_u16(3)]),
                ],
            ),
        )
        .kv("t.empty", v_arr(T_U64, &[]))
        .f32_tensor("token_embd.weight", &[16, 64])
        .f32_tensor("blk.0.attn_norm.weight", &[16])
        .f32_tensor("blk.0.ffn_up.weight", &[16, 4, 1])
        .tensor("blk.0.q8", &[32, 2], 8, vec![7u8; 2 * 34])
}
