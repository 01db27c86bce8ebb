//! Shared layer building blocks.

pub mod dsa;
pub mod mla;
pub mod moe;
