//! The process heap after a load: every path that loads weights (one process in `engine`, the
//! other MPI ranks in `dist`) hands what loading freed back to the system.

/// Returns the heap that loading freed (tokenizer construction, repack temporaries) to the
/// system: glibc keeps freed memory in its arenas otherwise, and peak RSS would carry it.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
