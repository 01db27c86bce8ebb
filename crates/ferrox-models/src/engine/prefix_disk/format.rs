//! One block file of the prefix cache on disk. Layout (little-endian):
//!
//! ```text
//! magic "FXPKV\0\0\1" · version u32 · model identity [32] · key type u8 · value type u8 ·
//! block u16 · token count u32 · layer count u32 · tokens (u32 each: the whole prefix up
//! to and including this block) · per layer, the block's rows (`CacheRows::encode`) ·
//! SHA-256 of everything before it [32]
//! ```
//!
//! A saved slot (llama-server's `/slots/{id}?action=save`) is the same layout under its own
//! magic ([`SLOT_MAGIC`]): the slot's whole history (any length) and one row per token.
//!
//! The checksum is verified before anything is parsed, and every count is checked against the
//! bytes left before it is allocated, so a truncated, corrupted or hostile file is an error
//! costing at most its own size.

use ferrox_core::cache::{CacheFormat, CacheRows, KvType, RowsDecodeError};
use sha2::{Digest, Sha256};

use super::super::prefix_block::BLOCK;
use crate::TokenId;

pub const MAGIC: [u8; 8] = *b"FXPKV\0\0\x01";
pub const SLOT_MAGIC: [u8; 8] = *b"FXSLT\0\0\x01";
pub const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 32 + 2 + 2 + 4 + 4;
const SUM: usize = 32;

/// What a file must have been written for: the model (its identity hash) and the element
/// types its cache keeps keys and values in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKey {
    pub model: [u8; 32],
    pub k: KvType,
    pub v: KvType,
}

impl CacheKey {
    /// The key of caches of model `model` kept in `format` (its products do not change the
    /// rows stored, so they are not part of it).
    pub fn new(model: [u8; 32], format: CacheFormat) -> CacheKey {
        CacheKey {
            model,
            k: format.k,
            v: format.v,
        }
    }

    /// The directory name under `--cache-dir`: model and types, so one dir serves many.
    pub fn dir_name(&self) -> String {
        let hex: String = self.model[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}-{}-{}", self.k.name(), self.v.name())
    }
}

/// A decoded block: its whole prefix of tokens and, per layer, its last [`BLOCK`] positions.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockFile {
    pub tokens: Vec<TokenId>,
    pub rows: Vec<CacheRows>,
}

/// Why a file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("file too short")]
    Truncated,
    #[error("not a ferrox prefix-cache or slot file")]
    Magic,
    #[error("format version {0} (this build reads {VERSION})")]
    Version(u32),
    #[error("checksum mismatch (corrupted)")]
    Checksum,
    #[error("written for another model or cache type")]
    Foreign,
    #[error("{0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Rows(#[from] RowsDecodeError),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// What a file holds: one block of the prefix cache, or a saved slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Block,
    Slot,
}

impl Kind {
    fn magic(self) -> &'static [u8; 8] {
        match self {
            Kind::Block => &MAGIC,
            Kind::Slot => &SLOT_MAGIC,
        }
    }
}

/// The file for the block ending `tokens` (a whole number of blocks), `rows` one per layer.
pub fn encode(key: &CacheKey, tokens: &[TokenId], rows: &[CacheRows]) -> Vec<u8> {
    encode_as(Kind::Block, key, tokens, rows)
}

/// The file of `kind` for `tokens` and `rows` (one per layer).
pub fn encode_as(kind: Kind, key: &CacheKey, tokens: &[TokenId], rows: &[CacheRows]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + tokens.len() * 4 + 64);
    out.extend_from_slice(kind.magic());
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&key.model);
    out.push(key.k.file_id());
    out.push(key.v.file_id());
    out.extend_from_slice(&(BLOCK as u16).to_le_bytes());
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for &t in tokens {
        out.extend_from_slice(&(t as u32).to_le_bytes());
    }
    for r in rows {
        r.encode(&mut out);
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The block in `bytes`, if they are a whole, intact file written for `key`.
pub fn decode(bytes: &[u8], key: &CacheKey) -> Result<BlockFile, DiskError> {
    decode_as(Kind::Block, bytes, key)
}

/// The tokens and rows in `bytes`, if they are a whole, intact file of `kind` for `key`.
pub fn decode_as(kind: Kind, bytes: &[u8], key: &CacheKey) -> Result<BlockFile, DiskError> {
    if bytes.len() < HEADER + SUM {
        return Err(DiskError::Truncated);
    }
    if bytes[..8] != *kind.magic() {
        return Err(DiskError::Magic);
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(DiskError::Version(version));
    }
    let (body, sum) = bytes.split_at(bytes.len() - SUM);
    if Sha256::digest(body).as_slice() != sum {
        return Err(DiskError::Checksum);
    }
    if body[12..44] != key.model || body[44] != key.k.file_id() || body[45] != key.v.file_id() {
        return Err(DiskError::Foreign);
    }
    if usize::from(u16::from_le_bytes([body[46], body[47]])) != BLOCK {
        return Err(DiskError::Invalid("block size"));
    }
    let n_tokens = u32_at(body, 48) as usize;
    let n_layers = u32_at(body, 52) as usize;
    let whole_blocks = n_tokens > 0 && n_tokens.is_multiple_of(BLOCK);
    if (kind == Kind::Block && !whole_blocks) || n_layers == 0 {
        return Err(DiskError::Invalid("token or layer count"));
    }
    // A block file holds one block's rows per layer, a slot's its whole history.
    let rows_per_layer = match kind {
        Kind::Block => BLOCK,
        Kind::Slot => n_tokens,
    };
    let mut rest = &body[HEADER..];
    // Checked against the bytes left before the token list is allocated.
    let raw = rest.get(..n_tokens * 4).ok_or(DiskError::Truncated)?;
    let tokens = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as TokenId)
        .collect();
    rest = &rest[n_tokens * 4..];
    // Each layer's rows take dozens of bytes, so a huge count fails on the bytes, not memory.
    let mut rows = Vec::new();
    for _ in 0..n_layers {
        let r = CacheRows::decode(&mut rest)?;
        if r.len() != rows_per_layer {
            return Err(DiskError::Invalid("rows per layer"));
        }
        rows.push(r);
    }
    if !rest.is_empty() {
        return Err(DiskError::Invalid("trailing bytes"));
    }
    Ok(BlockFile { tokens, rows })
}

/// The file name (without directory) of the block ending `prefix`, from a hasher fed the key
/// and then the prefix's tokens (see [`PrefixHasher`]).
pub fn file_name(digest: &[u8]) -> String {
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.fxkv")
}

/// Names the block files of one prefix block by block, hashing each token once.
pub struct PrefixHasher(Sha256);

impl PrefixHasher {
    pub fn new(key: &CacheKey) -> PrefixHasher {
        let mut h = Sha256::new();
        h.update(key.model);
        h.update([key.k.file_id(), key.v.file_id()]);
        PrefixHasher(h)
    }

    /// Feeds the next block; returns the file name of the prefix so far.
    pub fn next(&mut self, block: &[TokenId]) -> String {
        for &t in block {
            self.0.update((t as u32).to_le_bytes());
        }
        file_name(&self.0.clone().finalize())
    }
}
