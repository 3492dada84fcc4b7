//! Token samplers with llama.cpp semantics.
//!
//! The chain runs in llama.cpp's default order — repetition penalty, top-k, top-p, min-p,
//! temperature, then a draw — so that the same settings give the same candidate sets as
//! `llama-cli`. OpenAI's presence and frequency penalties (off by default) run right after the
//! repetition penalty. Truncation (top-k/p, min-p) therefore sees the *untempered* distribution, as in
//! llama.cpp; temperature only reshapes what survives. `temperature <= 0` means greedy.

use std::collections::{HashMap, VecDeque};

/// Settings of the sampler chain. Neutral values disable a stage: `top_k = 0`, `top_p = 1`,
/// `min_p = 0`, `repeat_penalty = 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// `<= 0` selects greedy decoding (argmax after penalties).
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// llama.cpp `--repeat-penalty`: positive logits of recent tokens are divided by it,
    /// negative ones multiplied, so a penalty > 1 always makes them less likely.
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalty looks at (llama.cpp `--repeat-last-n`).
    pub repeat_last_n: usize,
    /// OpenAI's `presence_penalty`: subtracted from the logit of every token this sampler has
    /// drawn at least once (0 = off).
    pub presence_penalty: f32,
    /// OpenAI's `frequency_penalty`: subtracted once per time this sampler has drawn the
    /// token (0 = off). Together: `logit -= presence * [count > 0] + frequency * count`.
    pub frequency_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's `common_params_sampling` defaults, with a fixed seed so runs repeat.
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0x5EED,
        }
    }
}

impl SamplerConfig {
    /// Argmax decoding: the reference mode for comparisons against other engines.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }
}

impl SamplerConfig {
    /// Checks every setting once, before any token is drawn: a NaN temperature or top-p would
    /// otherwise silently change the meaning of a stage (every comparison with NaN is false),
    /// and a zero penalty divides logits by zero. The error names the setting (as llama.cpp's
    /// flag spells it), the value and the allowed range.
    pub fn validate(&self) -> Result<(), SampleError> {
        let check = |name: &'static str, value: f32, ok: bool, allowed: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(SampleError::BadSetting {
                    name,
                    value,
                    allowed,
                })
            }
        };
        let t = self.temperature;
        check("temp", t, t.is_finite(), "a finite number (<= 0 is greedy)")?;
        let p = self.top_p;
        check("top-p", p, (0.0..=1.0).contains(&p), "0 to 1 (1 = off)")?;
        let m = self.min_p;
        check("min-p", m, (0.0..=1.0).contains(&m), "0 to 1 (0 = off)")?;
        let r = self.repeat_penalty;
        check(
            "repeat-penalty",
            r,
            r.is_finite() && r > 0.0,
            "a finite number above 0 (1 = off)",
        )?;
        for (name, v) in [
            ("presence-penalty", self.presence_penalty),
            ("frequency-penalty", self.frequency_penalty),
        ] {
            check(name, v, v.is_finite(), "a finite number (0 = off)")?;
        }
        Ok(())
    }
}

/// The first non-finite logit of a row (index, value): a NaN or infinity the forward pass
/// produced, which must be reported rather than sampled from.
pub fn first_non_finite(logits: &[f32]) -> Option<(usize, f32)> {
    logits
        .iter()
        .position(|l| !l.is_finite())
        .map(|i| (i, logits[i]))
}

#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("cannot sample from an empty logits row")]
    EmptyLogits,
    #[error(
        "the model produced a non-finite logit ({value} for token {token}); the weights or the \
         metadata are broken"
    )]
    NonFiniteLogit { token: usize, value: f32 },
    #[error("--{name} {value}: must be {allowed}")]
    BadSetting {
        name: &'static str,
        value: f32,
        allowed: &'static str,
    },
}

/// A token still in the running, with its (possibly penalised) logit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Stateful sampler: owns the RNG and the window of recent tokens the penalty needs.
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: SplitMix64,
    recent: VecDeque<u32>,
    /// How often each token was drawn (the presence and frequency penalties' counts).
    drawn: HashMap<u32, u32>,
    /// Reused so that sampling a 150k vocabulary does not allocate per token.
    scratch: Vec<Candidate>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = SplitMix64::new(cfg.seed);
        Self {
            cfg,
            rng,
            recent: VecDeque::new(),
            drawn: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Records a token (prompt or generated) in the penalty window.
    pub fn accept(&mut self, token: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Picks the next token from one row of logits. Does not call [`Sampler::accept`]: the
    /// caller decides what enters the history (llama.cpp accepts after sampling).
    ///
    /// A NaN or infinite logit is an error ([`SampleError::NonFiniteLogit`]): it means the
    /// forward pass broke, and any token drawn from such a row would be confident nonsense.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        if let Some((token, value)) = first_non_finite(logits) {
            return Err(SampleError::NonFiniteLogit { token, value });
        }
        let mut cands = std::mem::take(&mut self.scratch);
        cands.clear();
        cands.extend(logits.iter().enumerate().map(|(i, &logit)| Candidate {
            id: i as u32,
            logit,
        }));
        if self.cfg.repeat_penalty != 1.0 {
            let recent: Vec<u32> = self.recent.iter().copied().collect();
            apply_repeat_penalty(&mut cands, &recent, self.cfg.repeat_penalty);
        }
        let (presence, frequency) = (self.cfg.presence_penalty, self.cfg.frequency_penalty);
        if presence != 0.0 || frequency != 0.0 {
            apply_count_penalties(&mut cands, &self.drawn, presence, frequency);
        }
        let id = if self.cfg.temperature <= 0.0 {
            argmax(&cands)
        } else {
            top_k(&mut cands, self.cfg.top_k);
            top_p(&mut cands, self.cfg.top_p);
            min_p(&mut cands, self.cfg.min_p);
            let probs = softmax_with_temperature(&cands, self.cfg.temperature);
            let u = self.rng.next_f64();
            cands[draw(&probs, u)].id
        };
        self.scratch = cands;
        // Every token drawn is a generated token (prompt tokens are only `accept`ed), so these
        // are the counts over the completion that OpenAI's penalties use.
        *self.drawn.entry(id).or_insert(0) += 1;
        Ok(id)
    }
}

/// OpenAI's presence and frequency penalties: `logit -= presence * [count > 0] + frequency *
/// count` for each token with a count. `cands` must be the full row in id order (as
/// [`Sampler::sample`] builds it before truncation).
pub fn apply_count_penalties(
    cands: &mut [Candidate],
    counts: &HashMap<u32, u32>,
    presence: f32,
    frequency: f32,
) {
    for (&id, &n) in counts {
        if let Some(c) = cands.get_mut(id as usize) {
            debug_assert_eq!(c.id, id);
            if n > 0 {
                c.logit -= presence + frequency * n as f32;
            }
        }
    }
}

/// Index of the largest logit; ties go to the lowest id, as llama.cpp's greedy sampler does.
fn argmax(cands: &[Candidate]) -> u32 {
    let mut best = cands[0];
    for c in &cands[1..] {
        if c.logit > best.logit {
            best = *c;
        }
    }
    best.id
}

/// llama.cpp's repetition penalty: each distinct recent token is penalised once, however often
/// it occurred (divide positive logits, multiply negative ones).
pub fn apply_repeat_penalty(cands: &mut [Candidate], recent: &[u32], penalty: f32) {
    if recent.is_empty() || penalty == 1.0 {
        return;
    }
    let mut seen: HashMap<u32, ()> = HashMap::with_capacity(recent.len());
    for &t in recent {
        seen.insert(t, ());
    }
    for c in cands.iter_mut() {
        if seen.contains_key(&c.id) {
            if c.logit <= 0.0 {
                c.logit *= penalty;
            } else {
                c.logit /= penalty;
            }
        }
    }
}

/// Keeps the `k` highest logits, sorted descending (`k = 0` or `k >= len` keeps all, sorted).
pub fn top_k(cands: &mut Vec<Candidate>, k: usize) {
    let k = if k == 0 {
        cands.len()
    } else {
        k.min(cands.len())
    };
    if k < cands.len() {
        // Partition first so a 150k vocabulary is not fully sorted for k = 40.
        cands.select_nth_unstable_by(k - 1, |a, b| desc(a.logit, b.logit));
        cands.truncate(k);
    }
    cands.sort_by(|a, b| desc(a.logit, b.logit).then(a.id.cmp(&b.id)));
}

/// Nucleus sampling: keeps the smallest prefix (by probability, descending) whose mass reaches
/// `p`, including the token that crosses it. Always keeps at least one token.
pub fn top_p(cands: &mut Vec<Candidate>, p: f32) {
    if p >= 1.0 || cands.len() <= 1 {
        return;
    }
    cands.sort_by(|a, b| desc(a.logit, b.logit).then(a.id.cmp(&b.id)));
    let probs = softmax_with_temperature(cands, 1.0);
    let mut cum = 0.0f64;
    let mut keep = cands.len();
    for (i, &pr) in probs.iter().enumerate() {
        cum += pr;
        if cum >= p as f64 {
            keep = i + 1;
            break;
        }
    }
    cands.truncate(keep.max(1));
}

/// Min-p: drops tokens whose probability is below `min_p` times the most likely token's.
/// Done in logit space (`logit >= max + ln(min_p)`), which is exact and avoids a softmax.
pub fn min_p(cands: &mut Vec<Candidate>, min_p: f32) {
    if min_p <= 0.0 || cands.len() <= 1 {
        return;
    }
    let max = cands
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    // Clamped so that min_p > 1 keeps the top token instead of emptying the set.
    let threshold = max + min_p.min(1.0).ln();
    cands.retain(|c| c.logit >= threshold);
}

/// Probabilities of the candidates after dividing logits by `temperature`, in f64 so that long
/// tails do not lose mass to rounding.
pub fn softmax_with_temperature(cands: &[Candidate], temperature: f32) -> Vec<f64> {
    let t = temperature as f64;
    let max = cands
        .iter()
        .map(|c| c.logit as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        // Everything masked: fall back to uniform rather than dividing by zero.
        return vec![1.0 / cands.len() as f64; cands.len()];
    }
    let mut probs: Vec<f64> = cands
        .iter()
        .map(|c| ((c.logit as f64 - max) / t).exp())
        .collect();
    let sum: f64 = probs.iter().sum();
    for p in &mut probs {
        *p /= sum;
    }
    probs
}

/// Inverse-CDF draw: the first index whose cumulative probability exceeds `u` in `[0, 1)`.
pub fn draw(probs: &[f64], u: f64) -> usize {
    let mut cum = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        cum += p;
        if u < cum {
            return i;
        }
    }
    // Rounding can leave the total a hair below 1; the last token with mass takes the rest.
    probs.iter().rposition(|&p| p > 0.0).unwrap_or(0)
}

fn desc(a: f32, b: f32) -> std::cmp::Ordering {
    b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal)
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, seedable, and good enough for sampling; having our
/// own keeps a seed's token stream stable across dependency upgrades.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` from the top 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
