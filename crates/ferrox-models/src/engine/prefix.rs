//! The engine's prefix cache across requests: the keys and values of finished requests kept
//! in RAM as a radix tree over fixed blocks of tokens (vLLM's automatic prefix caching, SGLang's
//! RadixAttention, at block granularity), so a request that shares a prefix with any earlier
//! one — on whatever slot it ran — copies those positions instead of evaluating them.
//!
//! Positions are exact to copy: batch invariance makes a position's keys and values a
//! function of the tokens up to it, whoever computed them. Least recently used leaves go first
//! when the tree outgrows its byte budget. Models with recurrent layers (whose state is not a
//! function of single rows) never enter it.

use std::collections::HashMap;
use std::sync::Arc;

use super::prefix_block::BLOCK;
use super::prefix_disk::DiskSink;
use crate::TokenId;
use ferrox_core::cache::{CacheRows, KvCache};

struct Node {
    parent: Option<usize>,
    /// This block's tokens (the edge from the parent).
    tokens: Vec<TokenId>,
    /// Per layer, this block's positions (shared with the disk writer while it writes them).
    rows: Arc<[CacheRows]>,
    children: HashMap<Vec<TokenId>, usize>,
    last_used: u64,
    bytes: usize,
}

/// The tree; `budget` 0 disables it.
pub struct PrefixCache {
    budget: usize,
    bytes: usize,
    tick: u64,
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    roots: HashMap<Vec<TokenId>, usize>,
    /// Where inserted prefixes also go (`--cache-dir`).
    disk: Option<DiskSink>,
}

impl PrefixCache {
    pub fn new(budget: usize) -> PrefixCache {
        PrefixCache {
            budget,
            bytes: 0,
            tick: 0,
            nodes: Vec::new(),
            free: Vec::new(),
            roots: HashMap::new(),
            disk: None,
        }
    }

    /// Hands every prefix inserted from now on to `sink` too.
    pub fn set_disk(&mut self, sink: DiskSink) {
        self.disk = Some(sink);
    }

    /// Whether inserted prefixes also go to disk.
    pub fn persisting(&self) -> bool {
        self.disk.is_some()
    }

    /// Adds one block read from disk: `tokens` is its whole prefix, whose earlier blocks must
    /// be in the tree already (callers go shortest prefix first). False when it is not added:
    /// parent missing, already present, wrong shape or over the budget.
    pub fn insert_block(&mut self, tokens: &[TokenId], rows: Vec<CacheRows>) -> bool {
        let Some(start) = tokens.len().checked_sub(BLOCK) else {
            return false;
        };
        if !start.is_multiple_of(BLOCK) || rows.iter().any(|r| r.len() != BLOCK) {
            return false;
        }
        let mut at = None;
        for block in tokens[..start].chunks_exact(BLOCK) {
            match self.child(at, block) {
                Some(i) => at = Some(i),
                None => return false,
            }
        }
        let block = &tokens[start..];
        let bytes: usize = rows.iter().map(CacheRows::bytes).sum();
        if self.child(at, block).is_some() || self.bytes + bytes > self.budget {
            return false;
        }
        self.add(at, block.to_vec(), rows.into());
        true
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("live node")
    }

    fn child(&self, parent: Option<usize>, block: &[TokenId]) -> Option<usize> {
        match parent {
            None => self.roots.get(block).copied(),
            Some(p) => self.node(p).children.get(block).copied(),
        }
    }

    /// The nodes of the longest cached prefix of `tokens`, in order (whole blocks only).
    pub fn lookup(&mut self, tokens: &[TokenId]) -> Vec<usize> {
        let mut path = Vec::new();
        let mut at = None;
        for block in tokens.chunks_exact(BLOCK) {
            let Some(i) = self.child(at, block) else {
                break;
            };
            path.push(i);
            at = Some(i);
        }
        self.tick += 1;
        for &i in &path {
            if let Some(n) = self.nodes[i].as_mut() {
                n.last_used = self.tick;
            }
        }
        path
    }

    /// Appends the positions of `path` (from [`lookup`](Self::lookup)), starting at block
    /// `from_block`, to `caches`; false when a cache refused them (then the caller cuts back).
    pub fn restore(&self, path: &[usize], from_block: usize, caches: &mut [KvCache]) -> bool {
        path[from_block.min(path.len())..].iter().all(|&i| {
            let n = self.node(i);
            n.rows.len() == caches.len()
                && caches
                    .iter_mut()
                    .zip(n.rows.iter())
                    .all(|(c, r)| c.append_rows(r))
        })
    }

    /// The tokens of `path`'s blocks.
    pub fn tokens<'a>(&'a self, path: &'a [usize]) -> impl Iterator<Item = TokenId> + 'a {
        path.iter()
            .flat_map(move |&i| self.node(i).tokens.iter().copied())
    }

    /// Keeps the whole blocks of `history` whose positions `caches` hold; nothing when the
    /// caches cannot hand out rows (recurrent layers).
    pub fn insert(&mut self, history: &[TokenId], caches: &[KvCache]) {
        if !self.enabled() || caches.iter().any(|c| !c.rows_portable()) {
            return;
        }
        let held = caches.iter().map(KvCache::len).min().unwrap_or(0);
        let n_blocks = history.len().min(held) / BLOCK;
        self.tick += 1;
        let mut at = None;
        let mut sent = Vec::new();
        for b in 0..n_blocks {
            let block = &history[b * BLOCK..(b + 1) * BLOCK];
            let i = match self.child(at, block) {
                Some(i) => i,
                None => {
                    let rows: Option<Vec<CacheRows>> = caches
                        .iter()
                        .map(|c| c.copy_rows(b * BLOCK, (b + 1) * BLOCK))
                        .collect();
                    let Some(rows) = rows else { break };
                    self.add(at, block.to_vec(), rows.into())
                }
            };
            if let Some(n) = self.nodes[i].as_mut() {
                n.last_used = self.tick;
                if self.disk.is_some() {
                    sent.push(n.rows.clone());
                }
            }
            at = Some(i);
        }
        if let Some(disk) = &self.disk {
            if !sent.is_empty() {
                disk.put(history[..sent.len() * BLOCK].to_vec(), sent);
            }
        }
        self.evict();
    }

    fn add(
        &mut self,
        parent: Option<usize>,
        tokens: Vec<TokenId>,
        rows: Arc<[CacheRows]>,
    ) -> usize {
        let bytes = rows.iter().map(CacheRows::bytes).sum::<usize>()
            + tokens.len() * std::mem::size_of::<TokenId>();
        let node = Node {
            parent,
            tokens: tokens.clone(),
            rows,
            children: HashMap::new(),
            last_used: self.tick,
            bytes,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        match parent {
            None => self.roots.insert(tokens, i),
            Some(p) => self.nodes[p]
                .as_mut()
                .expect("live parent")
                .children
                .insert(tokens, i),
        };
        self.bytes += bytes;
        i
    }

    /// Drops least recently used leaves until the tree fits its budget.
    fn evict(&mut self) {
        while self.bytes > self.budget {
            let leaf = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
                .filter(|(_, n)| n.children.is_empty())
                .min_by_key(|(_, n)| n.last_used)
                .map(|(i, _)| i);
            let Some(i) = leaf else { return };
            let Some(n) = self.nodes[i].take() else {
                return;
            };
            self.bytes -= n.bytes;
            self.free.push(i);
            match n.parent {
                None => self.roots.remove(&n.tokens),
                Some(p) => self.nodes[p]
                    .as_mut()
                    .and_then(|p| p.children.remove(&n.tokens)),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_of(len: usize, salt: f32) -> KvCache {
        let mut c = KvCache::new(1, 2);
        for p in 0..len {
            c.append(&[p as f32, salt], &[salt, p as f32]);
        }
        c
    }

    #[test]
    fn stores_whole_blocks_and_restores_them_exactly() {
        let mut t = PrefixCache::new(1 << 20);
        let hist: Vec<TokenId> = (0..40).collect();
        let src = [cache_of(40, 1.0), cache_of(40, 2.0)];
        t.insert(&hist, &src);
        let mut prompt = hist[..35].to_vec();
        prompt.push(999);
        let path = t.lookup(&prompt);
        assert_eq!(path.len(), 2, "two whole blocks of 16");
        assert_eq!(t.tokens(&path).collect::<Vec<_>>(), hist[..32]);
        let mut dst = [KvCache::new(1, 2), KvCache::new(1, 2)];
        assert!(t.restore(&path, 0, &mut dst));
        for (d, s) in dst.iter().zip(&src) {
            assert_eq!(d.len(), 32);
            assert_eq!(d.keys(), &s.keys()[..64]);
            assert_eq!(d.values(), &s.values()[..64]);
        }
        // A diverging prompt shares only the first block.
        let mut other = hist[..20].to_vec();
        other[18] = 7;
        assert_eq!(t.lookup(&other).len(), 1);
    }

    #[test]
    fn evicts_least_recently_used_leaves_within_budget() {
        let one = {
            let mut t = PrefixCache::new(usize::MAX);
            t.insert(&(0..16).collect::<Vec<_>>(), &[cache_of(16, 0.0)]);
            t.bytes()
        };
        let mut t = PrefixCache::new(2 * one);
        let a: Vec<TokenId> = (0..16).collect();
        let b: Vec<TokenId> = (100..116).collect();
        let c: Vec<TokenId> = (200..216).collect();
        t.insert(&a, &[cache_of(16, 0.0)]);
        t.insert(&b, &[cache_of(16, 0.0)]);
        t.lookup(&a); // a is now more recent than b
        t.insert(&c, &[cache_of(16, 0.0)]);
        assert!(t.bytes() <= 2 * one);
        assert_eq!(t.lookup(&a).len(), 1);
        assert_eq!(t.lookup(&b).len(), 0, "b was least recently used");
        assert_eq!(t.lookup(&c).len(), 1);
        let mut off = PrefixCache::new(0);
        off.insert(&a, &[cache_of(16, 0.0)]);
        assert_eq!(off.bytes(), 0);
    }
}
