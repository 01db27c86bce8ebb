//! llama-server's slot persistence (tools/server/README.md, `POST /slots/{id_slot}?action=
//! save|restore|erase`): an idle slot's history and every layer's keys and values as bytes,
//! in the prefix cache's file format (`prefix_disk::format`, kind `Slot`: header, rows as
//! `CacheRows::encode`, SHA-256), and back. A file that is truncated, corrupted, of another
//! model or cache type, or that does not fit this engine's caches is refused with the reason,
//! the slot left as it was (or empty, when the rows fail while being copied in): never
//! half-restored.

use super::prefix_disk::format::{self, Kind};
use super::prefix_disk::{CacheKey, DiskError};
use super::BatchEngine;
use crate::TokenId;
use ferrox_core::cache::CacheRows;

/// Why a slot action was refused.
#[derive(Debug, thiserror::Error)]
pub enum SlotFileError {
    #[error("no slot {slot}: this server has slots 0 to {}", .count.saturating_sub(1))]
    NoSlot { slot: usize, count: usize },
    #[error("slot {0} is busy")]
    Busy(usize),
    #[error("this model's caches cannot be saved or restored (recurrent layers, or caches held by other processes)")]
    NotPortable,
    #[error("not a slot file of this model: {0}")]
    File(#[from] DiskError),
    #[error("the slot file does not fit this model: {0}")]
    Mismatch(String),
}

impl BatchEngine<'_> {
    fn idle_slot(&self, slot: usize) -> Result<(), SlotFileError> {
        let s = self.slots.get(slot).ok_or(SlotFileError::NoSlot {
            slot,
            count: self.slots.len(),
        })?;
        if s.job.is_some() {
            return Err(SlotFileError::Busy(slot));
        }
        if !self.decoder.caches_local() {
            return Err(SlotFileError::NotPortable);
        }
        Ok(())
    }

    /// Idle slot `slot`'s history and caches as a file for `key`, and its token count.
    pub fn save_slot(
        &self,
        slot: usize,
        key: &CacheKey,
    ) -> Result<(Vec<u8>, usize), SlotFileError> {
        self.idle_slot(slot)?;
        let s = &self.slots[slot];
        let held = s.caches.iter().map(|c| c.len()).min().unwrap_or(0);
        let n = s.history.len().min(held);
        let rows: Vec<CacheRows> = s
            .caches
            .iter()
            .map(|c| c.copy_rows(0, n))
            .collect::<Option<_>>()
            .ok_or(SlotFileError::NotPortable)?;
        Ok((
            format::encode_as(Kind::Slot, key, &s.history[..n], &rows),
            n,
        ))
    }

    /// Replaces idle slot `slot`'s history and caches with the file in `bytes` (written by
    /// [`save_slot`](Self::save_slot) for `key`); the tokens restored. A refused file leaves
    /// the slot as it was, one whose rows do not fit the caches leaves it empty.
    pub fn restore_slot(
        &mut self,
        slot: usize,
        key: &CacheKey,
        bytes: &[u8],
    ) -> Result<usize, SlotFileError> {
        self.idle_slot(slot)?;
        let file = format::decode_as(Kind::Slot, bytes, key)?;
        self.check_fits(&file.tokens, file.rows.len())?;
        let s = &mut self.slots[slot];
        s.truncate(0);
        s.stashed = false;
        let fits = s
            .caches
            .iter_mut()
            .zip(&file.rows)
            .all(|(c, r)| c.append_rows(r));
        if !fits {
            s.truncate(0);
            return Err(SlotFileError::Mismatch(
                "its keys and values have another shape or type than this model's caches".into(),
            ));
        }
        s.history = file.tokens;
        Ok(s.history.len())
    }

    /// Empties idle slot `slot`; the tokens it held.
    pub fn erase_slot(&mut self, slot: usize) -> Result<usize, SlotFileError> {
        self.idle_slot(slot)?;
        let n = self.slots[slot].history.len();
        self.slots[slot].truncate(0);
        Ok(n)
    }

    fn check_fits(&self, tokens: &[TokenId], layers: usize) -> Result<(), SlotFileError> {
        let caches = self.slots.first().map_or(0, |s| s.caches.len());
        if layers != caches {
            return Err(SlotFileError::Mismatch(format!(
                "{layers} layers, the model has {caches}"
            )));
        }
        if tokens.len() >= self.ctx_size {
            return Err(SlotFileError::Mismatch(format!(
                "{} tokens, the context holds {}",
                tokens.len(),
                self.ctx_size
            )));
        }
        let vocab = self.decoder.embed.rows();
        match tokens.iter().find(|&&t| t >= vocab) {
            Some(t) => Err(SlotFileError::Mismatch(format!(
                "token {t} is outside the vocabulary ({vocab})"
            ))),
            None => Ok(()),
        }
    }
}
