//! llama-server's slot actions as the engine thread sees them (tools/server/README.md,
//! `POST /slots/{id_slot}?action=save|restore|erase`): a task for one slot, run between
//! steps, answered on a one-shot channel. The HTTP side (file names, the save path, the
//! answers' shape) is `http::slots`.

/// What to do with a slot.
#[derive(Debug)]
pub enum SlotAction {
    /// Hand out the slot's history and caches as a file's bytes.
    Save,
    /// Replace the slot's history and caches with a file's bytes.
    Restore(Vec<u8>),
    /// Empty the slot.
    Erase,
}

/// What a slot action did.
#[derive(Debug, Default)]
pub struct SlotDone {
    /// Tokens saved, restored or erased.
    pub tokens: usize,
    /// The file's bytes (save only).
    pub bytes: Vec<u8>,
}

/// Why a slot action failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// No such slot, or a file that is not this model's slot file.
    #[error("{0}")]
    Invalid(String),
    /// The slot is generating.
    #[error("{0}")]
    Busy(String),
    /// This backend keeps no slots it could save.
    #[error("{0}")]
    Unsupported(String),
}

/// A slot action on its way to the engine thread.
pub struct SlotTask {
    pub slot: usize,
    pub action: SlotAction,
    pub reply: tokio::sync::oneshot::Sender<Result<SlotDone, SlotError>>,
}
