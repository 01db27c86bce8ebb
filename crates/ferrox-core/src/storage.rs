//! Shared, immutable byte storage: a memory map or an owned buffer, viewed by range.

use std::ops::Deref;
use std::sync::Arc;

/// What a `Bytes` view borrows from.
pub trait Storage: AsRef<[u8]> + Send + Sync {
    /// Drops `start..start + len` from this process's resident memory if it can be read back
    /// later without loss (a read-only file map); a no-op for owned memory.
    fn release(&self, _start: usize, _len: usize) {}
}

impl Storage for Vec<u8> {}

impl Storage for memmap2::Mmap {
    fn release(&self, start: usize, len: usize) {
        // SAFETY: the map is read-only, so dropped pages are re-read unchanged from the file
        // on the next access; the range is inside the map (checked by the view that asks).
        // Failure only means the pages stay resident.
        let _ =
            unsafe { self.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len) };
    }
}

/// A cheap-to-clone view of `len` bytes at `start` inside a shared owner (an mmap or a `Vec`).
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn Storage>,
    start: usize,
    len: usize,
}

impl Bytes {
    /// The whole of `owner`.
    pub fn new(owner: Arc<dyn Storage>) -> Self {
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

    /// `len` owned bytes starting at a multiple of 64 (a cache line: a 64-byte vector load
    /// from a buffer malloc aligned to 16 would straddle two lines half the time), zeroed and
    /// then written by `fill`.
    pub fn aligned_with(len: usize, fill: impl FnOnce(&mut [u8])) -> Self {
        const LINE: usize = 64;
        let mut v = vec![0u8; len + LINE - 1];
        let start = v.as_ptr().align_offset(LINE).min(LINE - 1);
        fill(&mut v[start..start + len]);
        // Moving the Vec into the Arc keeps its heap buffer where it is.
        Bytes {
            owner: Arc::new(v),
            start,
            len,
        }
    }

    /// Drops this view's pages from resident memory when that loses nothing (a file map whose
    /// tensor has been copied elsewhere); the data stays readable.
    pub fn release(&self) {
        self.owner.release(self.start, self.len);
    }

    /// Like [`release`](Self::release) for the whole owner (the file this view is part of):
    /// page-cache folios are mapped whole on a fault, so reading a small tensor leaves megabytes
    /// of its neighbours resident, which releasing only its own range would not drop.
    pub fn release_owner(&self) {
        self.owner.release(0, (*self.owner).as_ref().len());
    }

    /// Whether both views borrow from the same owner.
    pub fn same_owner(&self, other: &Bytes) -> bool {
        Arc::ptr_eq(&self.owner, &other.owner)
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
