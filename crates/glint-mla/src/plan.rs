//! One forward step described on the host: which tokens of which sequences, at which positions,
//! written to which pool rows, and which rows need logits. Prefill chunks and decode tokens of
//! different sequences mix freely. Everything is checked here, before a step touches the
//! device, so a bad plan is an error and the cache is left as it was.

use glint_core::Backend;

use std::collections::HashMap;

use crate::cache::{BlockAllocator, SeqCache};
use crate::error::{MlaError, Result};

/// What a step was sized for at load; a plan larger than this is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    /// Tokens per step (the micro-batch, llama.cpp's `-ub`).
    pub max_tokens: usize,
    /// Sequences per step.
    pub max_seqs: usize,
    /// Block-table entries per sequence (context length / block size, rounded up).
    pub max_blocks: usize,
}

/// Which of a sequence's tokens in the step need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
}

#[derive(Debug, Clone, Default)]
pub struct BatchPlan {
    pub(crate) tokens: Vec<u32>,
    pub(crate) positions: Vec<u32>,
    pub(crate) token_seq: Vec<u32>,
    pub(crate) slots: Vec<u32>,
    pub(crate) tables: Vec<Vec<u32>>,
    pub(crate) logits: Vec<u32>,
    pub(crate) block_size: usize,
    /// Per plan sequence, the highest position a next token may have: every position before a
    /// token must be cached or in the step.
    next_pos: Vec<usize>,
    /// Which plan sequence writes into each block, so two never write one row.
    writers: HashMap<u32, usize>,
}

impl BatchPlan {
    pub fn new(block_size: usize) -> Self {
        Self {
            block_size,
            ..Self::default()
        }
    }
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }
    pub fn n_seqs(&self) -> usize {
        self.tables.len()
    }
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    /// Step rows whose logits are returned, in order.
    pub fn logit_rows(&self) -> &[u32] {
        &self.logits
    }
    /// Keys the most-advanced token of the step sees (its position + 1).
    pub fn max_seen(&self) -> usize {
        self.positions
            .iter()
            .map(|&p| p as usize + 1)
            .max()
            .unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Registers a sequence (its block table) with the step and returns its index in the plan,
    /// for [`Self::add_token`]. [`Self::push`] does both for a run of tokens.
    pub fn add_seq(&mut self, seq: &SeqCache) -> usize {
        self.tables.push(seq.blocks.clone());
        self.next_pos.push(seq.len);
        self.tables.len() - 1
    }

    /// Adds one token of plan sequence `s` at position `pos`; tokens of different sequences
    /// may interleave in any order. Every position before `pos` must be cached or already in
    /// this step (no gap), and no other plan sequence may write the same block.
    pub fn add_token(&mut self, s: usize, token: u32, pos: usize, logits: bool) -> Result<()> {
        let bs = self.block_size;
        let table = self
            .tables
            .get(s)
            .ok_or_else(|| MlaError::Plan(format!("no sequence {s} in the plan")))?;
        let reserved = table.len() * bs;
        if pos >= reserved {
            return Err(MlaError::NotReserved {
                needed: pos + 1,
                reserved,
            });
        }
        if pos > self.next_pos[s] {
            return Err(MlaError::Gap {
                start: pos,
                len: self.next_pos[s],
            });
        }
        let block = table[pos / bs];
        let slot = block as usize * bs + pos % bs;
        if let Some(&other) = self.writers.get(&block) {
            if other != s {
                return Err(MlaError::SlotConflict {
                    slot: slot as u32,
                    block,
                    a: other,
                    b: s,
                });
            }
        }
        let (Ok(pos32), Ok(slot32)) = (u32::try_from(pos), u32::try_from(slot)) else {
            return Err(MlaError::Plan(format!(
                "position {pos} / pool row {slot} does not fit u32"
            )));
        };
        self.writers.insert(block, s);
        self.next_pos[s] = self.next_pos[s].max(pos + 1);
        if logits {
            self.logits.push(self.tokens.len() as u32);
        }
        self.tokens.push(token);
        self.positions.push(pos32);
        self.token_seq.push(s as u32);
        self.slots.push(slot32);
        Ok(())
    }

    /// Adds `tokens` of the sequence `seq` at positions `start..` (`start ≤ seq.len`: a plan
    /// continues a sequence or rewrites its tail). The positions must already be reserved in
    /// the pool ([`crate::KvPool::reserve`]). Returns the sequence's index in the plan. On
    /// error the plan is unchanged.
    pub fn push(
        &mut self,
        seq: &SeqCache,
        tokens: &[u32],
        start: usize,
        logits: Logits,
    ) -> Result<usize> {
        if tokens.is_empty() {
            return Err(MlaError::Plan("a sequence with no tokens".into()));
        }
        if start > seq.len {
            return Err(MlaError::Gap {
                start,
                len: seq.len,
            });
        }
        let end = start + tokens.len();
        let reserved = seq.blocks.len() * self.block_size;
        if end > reserved {
            return Err(MlaError::NotReserved {
                needed: end,
                reserved,
            });
        }
        let s = self.add_seq(seq);
        let last = tokens.len() - 1;
        for (i, &t) in tokens.iter().enumerate() {
            let want = match logits {
                Logits::None => false,
                Logits::Last => i == last,
                Logits::All => true,
            };
            if let Err(e) = self.add_token(s, t, start + i, want) {
                self.truncate_seqs(s);
                return Err(e);
            }
        }
        Ok(s)
    }

    /// Drops plan sequences `s..` and their tokens (undo of a failed [`Self::push`]).
    fn truncate_seqs(&mut self, s: usize) {
        let keep = self
            .token_seq
            .iter()
            .take_while(|&&q| (q as usize) < s)
            .count();
        self.tokens.truncate(keep);
        self.positions.truncate(keep);
        self.token_seq.truncate(keep);
        self.slots.truncate(keep);
        self.logits.retain(|&r| (r as usize) < keep);
        self.tables.truncate(s);
        self.next_pos.truncate(s);
        self.writers.retain(|_, w| *w < s);
    }

    /// Checks the plan against what the step was sized for and against the pool: every block
    /// of every table must be in the pool and owned by a sequence.
    pub fn validate(&self, limits: &StepLimits, blocks: &BlockAllocator) -> Result<()> {
        let n_blocks = blocks.n_blocks();
        let over = |what: &'static str, n: usize, limit: usize| {
            if n > limit {
                Err(MlaError::PlanTooLarge { what, n, limit })
            } else {
                Ok(())
            }
        };
        if self.tokens.is_empty() {
            return Err(MlaError::Plan("empty step".into()));
        }
        over("tokens", self.tokens.len(), limits.max_tokens)?;
        over("sequences", self.tables.len(), limits.max_seqs)?;
        for t in &self.tables {
            over("blocks of one sequence", t.len(), limits.max_blocks)?;
            if let Some(&b) = t.iter().find(|&&b| b as usize >= n_blocks) {
                return Err(MlaError::BlockOutOfPool { block: b, n_blocks });
            }
            if let Some(&b) = t.iter().find(|&&b| blocks.ref_count(b) == 0) {
                return Err(MlaError::BlockNotOwned { block: b });
            }
        }
        Ok(())
    }
}

/// The per-step values every layer reads, in device buffers sized once for [`StepLimits`] and
/// overwritten before each step (no allocation, nothing per step in op arguments but sizes).
pub struct StepInputs<B: Backend> {
    pub positions: B::Ids,
    /// Pool row of each token.
    pub slots: B::Ids,
    pub token_seq: B::Ids,
    /// `[max_seqs × max_blocks]`.
    pub tables: B::Ids,
    /// `[max_tokens × n_heads]`, `h` at `t·n_heads + h`: the default per-head product's ids.
    pub head_ids: B::Ids,
    /// Step rows that need logits.
    pub logit_rows: B::Ids,
    pub limits: StepLimits,
    pub block_size: usize,
    /// Tokens of the current step.
    pub n: usize,
    /// Keys the most-advanced token of the current step sees.
    pub max_seen: usize,
    /// Host copy of the table rows, reused so writing a plan does not allocate.
    flat: Vec<u32>,
}

impl<B: Backend> StepInputs<B> {
    pub fn new(be: &B, limits: StepLimits, block_size: usize, n_heads: usize) -> Result<Self> {
        let table_len = limits
            .max_seqs
            .checked_mul(limits.max_blocks)
            .ok_or_else(|| MlaError::BadPool(format!("{limits:?}")))?;
        let heads: Vec<u32> = (0..limits.max_tokens * n_heads)
            .map(|i| (i % n_heads.max(1)) as u32)
            .collect();
        Ok(Self {
            positions: be.alloc_ids(limits.max_tokens)?,
            slots: be.alloc_ids(limits.max_tokens)?,
            token_seq: be.alloc_ids(limits.max_tokens)?,
            tables: be.alloc_ids(table_len)?,
            head_ids: be.upload_ids(&heads)?,
            logit_rows: be.alloc_ids(limits.max_tokens)?,
            limits,
            block_size,
            n: 0,
            max_seen: 0,
            flat: vec![0; table_len],
        })
    }

    /// Key capacity of a step: what index and score widths are sized for.
    pub fn kv_capacity(&self) -> usize {
        self.limits.max_blocks * self.block_size
    }

    pub fn pages(&self) -> glint_core::Pages<'_, B> {
        glint_core::Pages {
            tables: &self.tables,
            token_seq: &self.token_seq,
            max_blocks: self.limits.max_blocks,
            block_size: self.block_size,
        }
    }

    /// Writes a validated plan's values into the device buffers.
    pub fn write(&mut self, be: &B, plan: &BatchPlan) -> Result<()> {
        if plan.block_size != self.block_size {
            return Err(MlaError::Plan(format!(
                "plan made for block size {}, the pool has {}",
                plan.block_size, self.block_size
            )));
        }
        let mb = self.limits.max_blocks;
        let over = |what: &'static str, n: usize, limit: usize| {
            if n > limit {
                Err(MlaError::PlanTooLarge { what, n, limit })
            } else {
                Ok(())
            }
        };
        over("tokens", plan.tokens.len(), self.limits.max_tokens)?;
        over("sequences", plan.tables.len(), self.limits.max_seqs)?;
        for t in &plan.tables {
            over("blocks of one sequence", t.len(), mb)?;
        }
        for (s, t) in plan.tables.iter().enumerate() {
            let row = &mut self.flat[s * mb..(s + 1) * mb];
            row[..t.len()].copy_from_slice(t);
            row[t.len()..].fill(0);
        }
        be.write_ids(&mut self.positions, &plan.positions)?;
        be.write_ids(&mut self.slots, &plan.slots)?;
        be.write_ids(&mut self.token_seq, &plan.token_seq)?;
        be.write_ids(&mut self.tables, &self.flat[..plan.tables.len() * mb])?;
        be.write_ids(&mut self.logit_rows, &plan.logits)?;
        self.n = plan.tokens.len();
        self.max_seen = plan.max_seen();
        Ok(())
    }
}
