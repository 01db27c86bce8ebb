//! The unit of prefix reuse, in its own module because both stores of prefixes are made of it:
//! the RAM tree (`prefix`) has a node per block and the disk cache (`prefix_disk`) a file per
//! block, and the tree hands its blocks to the disk writer.

/// Tokens per tree node: small enough that a conversation's next turn loses little to the
/// last partial block, large enough that a node's per-layer copies are not tiny.
pub const BLOCK: usize = 16;
