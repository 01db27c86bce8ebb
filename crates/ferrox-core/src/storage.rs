//! Shared, immutable byte storage: a memory map or an owned buffer, viewed by range.

use std::ops::Deref;
use std::sync::Arc;

/// A cheap-to-clone view of `len` bytes at `start` inside a shared owner (an mmap or a `Vec`).
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl Bytes {
    /// The whole of `owner`.
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Self {
        let len = (*owner).as_ref().len();
        Bytes {
            owner,
            start: 0,
            len,
        }
    }

    pub fn from_vec(v: Vec<u8>) -> Self {
        Self::new(Arc::new(v))
    }

    /// A sub-view; `None` when `start..start + len` is outside this view.
    pub fn slice(&self, start: usize, len: usize) -> Option<Bytes> {
        let end = start.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(Bytes {
            owner: self.owner.clone(),
            start: self.start + start,
            len,
        })
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({} bytes at {})", self.len, self.start)
    }
}
