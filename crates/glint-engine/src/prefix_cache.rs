//! Prefix caching: full KV-pool blocks kept after their sequence is done, found again by the
//! tokens they were computed from.
//!
//! A block at position `i` of a sequence holds the cache rows of tokens `i·bs..(i+1)·bs`
//! (every layer's latent rows and, for DSA layers, its indexer key rows), and those rows are a
//! function of every token up to the end of the block. So a block is keyed by a hash of the
//! whole prefix through it: [`chain_hash`] of the previous block's key and this block's tokens.
//! Only full blocks are cached, and only after the step that wrote their last row.
//!
//! The cache holds one reference of its own on every block it knows ([`BlockAllocator`]
//! counts owners), so a cached block outlives its sequence. A cached block that only the
//! cache holds is *evictable*: [`PrefixCache::evict_lru`] gives the least recently released
//! one back to the allocator when the pool needs space. The key is 128 bits and each entry
//! also keeps its parent key and its own tokens, which a lookup compares, so a false hit needs
//! a 128-bit collision of the parent chain.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use glint_mla::BlockAllocator;

/// Key of the empty prefix (the parent of block 0).
pub const ROOT: u128 = 0;

/// Key of a block whose tokens are `tokens` and whose prefix before it has key `parent`.
pub fn chain_hash(parent: u128, tokens: &[u32]) -> u128 {
    let half = |salt: u64| {
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new_with_keys(salt, salt.rotate_left(29) ^ 0x5bd1);
        parent.hash(&mut h);
        tokens.hash(&mut h);
        h.finish()
    };
    let k = ((half(0x9e37_79b9_7f4a_7c15) as u128) << 64) | half(0xc2b2_ae3d_27d4_eb4f) as u128;
    // ROOT is reserved for "no parent".
    k.max(1)
}

struct Entry {
    block: u32,
    parent: u128,
    tokens: Box<[u32]>,
}

/// Cached blocks by prefix key, with their LRU order once unreferenced.
pub struct PrefixCache {
    by_key: HashMap<u128, Entry>,
    /// The key each cached block is stored under.
    key_of: Vec<Option<u128>>,
    /// Evictable blocks (only the cache holds them) by the time they became so.
    lru: BTreeMap<u64, u32>,
    /// Each evictable block's place in `lru`.
    stamp_of: Vec<Option<u64>>,
    clock: u64,
}

impl PrefixCache {
    pub fn new(n_blocks: usize) -> Self {
        Self {
            by_key: HashMap::new(),
            key_of: vec![None; n_blocks],
            lru: BTreeMap::new(),
            stamp_of: vec![None; n_blocks],
            clock: 0,
        }
    }

    /// Blocks the cache holds (referenced by sequences or not).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Cached blocks no sequence holds (they are free for the pool once evicted).
    pub fn n_evictable(&self) -> usize {
        self.lru.len()
    }

    pub fn is_evictable(&self, block: u32) -> bool {
        self.stamp_of
            .get(block as usize)
            .is_some_and(|s| s.is_some())
    }

    pub fn contains_block(&self, block: u32) -> bool {
        self.key_of.get(block as usize).is_some_and(|k| k.is_some())
    }

    /// The cached block for `key`, if its entry is that exact block (same parent, same
    /// tokens).
    pub fn lookup(&self, key: u128, parent: u128, tokens: &[u32]) -> Option<u32> {
        self.by_key
            .get(&key)
            .filter(|e| e.parent == parent && *e.tokens == *tokens)
            .map(|e| e.block)
    }

    /// Offers a sequence's freshly filled `block` under `key`. When no block is cached for
    /// `key` yet, the cache takes a reference on `block` and returns true; otherwise (an
    /// identical prefix was computed by another sequence at the same time) nothing changes.
    pub fn insert(
        &mut self,
        blocks: &mut BlockAllocator,
        key: u128,
        parent: u128,
        tokens: &[u32],
        block: u32,
    ) -> glint_mla::Result<bool> {
        if self.by_key.contains_key(&key) || self.contains_block(block) {
            return Ok(false);
        }
        blocks.retain(block)?;
        self.by_key.insert(
            key,
            Entry {
                block,
                parent,
                tokens: tokens.into(),
            },
        );
        self.key_of[block as usize] = Some(key);
        Ok(true)
    }

    /// A sequence takes `block` (a hit): it is no longer evictable.
    pub fn touch(&mut self, block: u32) {
        if let Some(s) = self.stamp_of[block as usize].take() {
            self.lru.remove(&s);
        }
    }

    /// A sequence let go of `block`; when it is cached and only the cache holds it now, it
    /// becomes the most recently used evictable block.
    pub fn released(&mut self, blocks: &BlockAllocator, block: u32) {
        if self.contains_block(block) && blocks.ref_count(block) == 1 {
            self.clock += 1;
            if let Some(s) = self.stamp_of[block as usize].replace(self.clock) {
                self.lru.remove(&s);
            }
            self.lru.insert(self.clock, block);
        }
    }

    /// Gives the least recently released evictable block back to the allocator; false when
    /// none is left.
    pub fn evict_lru(&mut self, blocks: &mut BlockAllocator) -> glint_mla::Result<bool> {
        let Some((&s, &b)) = self.lru.iter().next() else {
            return Ok(false);
        };
        self.lru.remove(&s);
        self.stamp_of[b as usize] = None;
        if let Some(k) = self.key_of[b as usize].take() {
            self.by_key.remove(&k);
        }
        blocks.release(b)?;
        Ok(true)
    }

    /// Evicts every evictable block; returns how many.
    pub fn evict_all(&mut self, blocks: &mut BlockAllocator) -> glint_mla::Result<usize> {
        let mut n = 0;
        while self.evict_lru(blocks)? {
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_the_whole_prefix() {
        let a = chain_hash(ROOT, &[1, 2, 3]);
        let b = chain_hash(ROOT, &[1, 2, 4]);
        assert_ne!(a, b);
        assert_ne!(chain_hash(a, &[5]), chain_hash(b, &[5]));
        assert_eq!(
            chain_hash(a, &[5]),
            chain_hash(chain_hash(ROOT, &[1, 2, 3]), &[5])
        );
        assert_ne!(a, ROOT);
    }

    #[test]
    fn cached_blocks_are_shared_then_evicted_least_recent_first() {
        let mut alloc = BlockAllocator::new(4);
        let mut pc = PrefixCache::new(4);
        let got = alloc.alloc(2).unwrap();
        let (k0, k1) = (chain_hash(ROOT, &[1, 2]), chain_hash(ROOT, &[3, 4]));
        assert!(pc.insert(&mut alloc, k0, ROOT, &[1, 2], got[0]).unwrap());
        assert!(pc.insert(&mut alloc, k1, ROOT, &[3, 4], got[1]).unwrap());
        // Same key again (computed twice at once): not taken.
        let other = alloc.alloc(1).unwrap()[0];
        assert!(!pc.insert(&mut alloc, k0, ROOT, &[1, 2], other).unwrap());
        assert_eq!(alloc.ref_count(got[0]), 2);
        assert_eq!(pc.lookup(k0, ROOT, &[1, 2]), Some(got[0]));
        assert_eq!(pc.lookup(k0, ROOT, &[1, 3]), None, "tokens are compared");
        assert_eq!(pc.lookup(k0, 7, &[1, 2]), None, "the parent is compared");
        // The sequence lets go: block 1 first, then block 0.
        for b in [got[1], got[0]] {
            alloc.release(b).unwrap();
            pc.released(&alloc, b);
        }
        alloc.release(other).unwrap();
        pc.released(&alloc, other); // not cached: nothing
        assert_eq!(pc.n_evictable(), 2);
        assert_eq!(alloc.n_free(), 2);
        // A hit takes block 0 back out of the LRU.
        alloc.retain(got[0]).unwrap();
        pc.touch(got[0]);
        assert_eq!(pc.n_evictable(), 1);
        assert!(pc.evict_lru(&mut alloc).unwrap());
        assert_eq!(pc.lookup(k1, ROOT, &[3, 4]), None, "evicted");
        assert!(!pc.evict_lru(&mut alloc).unwrap(), "block 0 is in use");
        alloc.release(got[0]).unwrap();
        pc.released(&alloc, got[0]);
        assert_eq!(pc.evict_all(&mut alloc).unwrap(), 1);
        assert!(pc.is_empty());
        assert_eq!(alloc.n_free(), 4);
        assert!((0..4).all(|b| alloc.ref_count(b) == 0));
    }
}
