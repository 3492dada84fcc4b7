//! The paged latent cache: per layer, a pool of fixed-size blocks of `kv_lora + rope` rows
//! (normalised latent and rotated shared rope key; V is a view of the latent part) and, for DSA
//! layers, of indexer key rows. A sequence owns a block table; attention and the indexer read
//! through it. The pool is allocated once, so no step allocates, and many sequences share it.

use glint_core::{Backend, CacheType};

use crate::error::{MlaError, Result};

/// One layer's share of the pool.
pub struct PoolLayer<B: Backend> {
    /// `n_blocks·block_size` rows of `kv_lora + rope`.
    pub latent: B::Cache,
    /// `n_blocks·block_size` rows of the indexer head_dim, for layers with an indexer.
    pub index_k: Option<B::Cache>,
}

/// Element types of the two caches of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheTypes {
    pub latent: CacheType,
    /// f32, f16, fp8 or q8 (bf16 is refused: its 8-bit mantissa is what the indexer's near-ties
    /// cannot afford, and no peer stores indexer keys in it). q8 makes the CPU's scan an
    /// integer one (docs/cache-types.md).
    pub index: CacheType,
}

/// Which blocks are free, and how many owners each used block has (blocks shared by prefix
/// caching are freed when the last owner lets go).
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    refs: Vec<u32>,
    /// Free block ids, the lowest on top, so a fresh pool hands out consecutive blocks.
    free: Vec<u32>,
}

impl BlockAllocator {
    pub fn new(n_blocks: usize) -> Self {
        Self {
            refs: vec![0; n_blocks],
            free: (0..n_blocks as u32).rev().collect(),
        }
    }
    pub fn n_blocks(&self) -> usize {
        self.refs.len()
    }
    pub fn n_free(&self) -> usize {
        self.free.len()
    }
    /// `n` blocks, or an error and no change when fewer are free.
    pub fn alloc(&mut self, n: usize) -> Result<Vec<u32>> {
        if n > self.free.len() {
            return Err(MlaError::PoolExhausted {
                needed: n,
                free: self.free.len(),
                total: self.refs.len(),
            });
        }
        let got = self.free.split_off(self.free.len() - n);
        let got: Vec<u32> = got.into_iter().rev().collect();
        for &b in &got {
            self.refs[b as usize] = 1;
        }
        Ok(got)
    }
    fn owned(&mut self, b: u32) -> Result<&mut u32> {
        let n_blocks = self.refs.len();
        match self.refs.get_mut(b as usize) {
            Some(r) if *r > 0 => Ok(r),
            Some(_) => Err(MlaError::BlockNotOwned { block: b }),
            None => Err(MlaError::BlockOutOfPool { block: b, n_blocks }),
        }
    }
    /// One more owner of a used block (prefix sharing).
    pub fn retain(&mut self, b: u32) -> Result<()> {
        *self.owned(b)? += 1;
        Ok(())
    }
    /// One owner fewer; the block is free again when none is left. Releasing a free block is
    /// an error (it would put the block on the free list twice and hand it to two sequences).
    pub fn release(&mut self, b: u32) -> Result<()> {
        let r = self.owned(b)?;
        *r -= 1;
        if *r == 0 {
            self.free.push(b);
        }
        Ok(())
    }
    /// Owners of block `b` (0 when free or outside the pool).
    pub fn ref_count(&self, b: u32) -> u32 {
        self.refs.get(b as usize).copied().unwrap_or(0)
    }
}

/// A sequence's place in the pool: its block table and how many positions hold valid rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqCache {
    pub blocks: Vec<u32>,
    /// Positions `0..len` are cached.
    pub len: usize,
}

/// The latent (+ indexer key) pool of every layer.
pub struct KvPool<B: Backend> {
    pub layers: Vec<PoolLayer<B>>,
    pub blocks: BlockAllocator,
    block_size: usize,
    row: usize,
    id: u64,
}

impl<B: Backend> KvPool<B> {
    /// Process-unique (see [`glint_core::unique_id`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A pool of `n_blocks` blocks of `block_size` tokens; `index_dims[l]` is the indexer key
    /// width of layer `l` (None for layers without indexer). Sizes that overflow are an error
    /// naming them, not an abort.
    pub fn new(
        backend: &B,
        n_blocks: usize,
        block_size: usize,
        row: usize,
        index_dims: &[Option<usize>],
        types: CacheTypes,
    ) -> Result<Self> {
        if block_size == 0 {
            return Err(MlaError::BadPool("block size 0".into()));
        }
        if types.index == CacheType::Bf16 {
            return Err(MlaError::BadPool(
                "indexer keys can be cached as f32, f16, fp8 or q8, not bf16".into(),
            ));
        }
        let rows = n_blocks
            .checked_mul(block_size)
            .ok_or_else(|| MlaError::BadPool(format!("{n_blocks} blocks of {block_size}")))?;
        let layers = index_dims
            .iter()
            .map(|d| {
                Ok(PoolLayer {
                    latent: backend.alloc_cache(rows, row, types.latent)?,
                    index_k: match d {
                        Some(d) => Some(backend.alloc_cache(rows, *d, types.index)?),
                        None => None,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            blocks: BlockAllocator::new(n_blocks),
            block_size,
            row,
            id: glint_core::unique_id(),
        })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
    /// Width of a latent row (kv_lora + rope).
    pub fn row(&self) -> usize {
        self.row
    }
    /// Tokens the whole pool holds.
    pub fn capacity(&self) -> usize {
        self.blocks.n_blocks() * self.block_size
    }

    /// Grows `seq`'s block table to hold `n_tokens` positions. On error (pool exhausted) `seq`
    /// and the pool are unchanged, so the caller can wait or preempt another sequence.
    pub fn reserve(&mut self, seq: &mut SeqCache, n_tokens: usize) -> Result<()> {
        let need = n_tokens.div_ceil(self.block_size);
        if need > seq.blocks.len() {
            let more = self.blocks.alloc(need - seq.blocks.len())?;
            seq.blocks.extend(more);
        }
        Ok(())
    }

    /// Returns every block of `seq` to the pool and empties it. A block `seq` does not own
    /// (a stale copy released twice) is an error naming it, and nothing is released.
    pub fn release(&mut self, seq: &mut SeqCache) -> Result<()> {
        for &b in &seq.blocks {
            if self.blocks.ref_count(b) == 0 {
                return Err(if (b as usize) < self.blocks.n_blocks() {
                    MlaError::BlockNotOwned { block: b }
                } else {
                    MlaError::BlockOutOfPool {
                        block: b,
                        n_blocks: self.blocks.n_blocks(),
                    }
                });
            }
        }
        for &b in &seq.blocks {
            self.blocks.release(b)?;
        }
        seq.blocks.clear();
        seq.len = 0;
        Ok(())
    }
}
