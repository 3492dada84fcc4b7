//! The generation loop: prefill the prompt once, then decode one token at a time from the KV
//! cache, streaming text as it becomes printable.
//!
//! The loop is written against [`LogitsSource`] rather than the model type so that it can be
//! tested with a scripted stand-in and reused by other model front-ends.

use std::time::{Duration, Instant};

use crate::sampler::{SampleError, Sampler, SamplerConfig};
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Anything that turns tokens at given positions into next-token logits while keeping a cache.
pub trait LogitsSource {
    type Error: std::error::Error + Send + Sync + 'static;
    /// Logits (`n_vocab` floats) for the last of `tokens`, placed at `start_pos..`.
    fn forward_last(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>, Self::Error>;
    /// Tokens currently cached.
    fn cache_len(&self) -> usize;
    /// Most tokens the cache can hold.
    fn ctx_len(&self) -> usize;
}

impl<B: glm5_model::Backend> LogitsSource for glm5_model::Glm5<'_, B> {
    type Error = glm5_model::ModelError;
    fn forward_last(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>, Self::Error> {
        glm5_model::Glm5::forward_last(self, tokens, start_pos)
    }
    fn cache_len(&self) -> usize {
        glm5_model::Glm5::cache_len(self)
    }
    fn ctx_len(&self) -> usize {
        glm5_model::Glm5::ctx_len(self)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("empty prompt: at least one token is needed to predict the next")]
    EmptyPrompt,
    #[error("prompt of {prompt} tokens does not fit the context of {ctx_len} tokens")]
    PromptTooLong { prompt: usize, ctx_len: usize },
    #[error("model: {0}")]
    Model(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Sample(#[from] SampleError),
}

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    /// Stop at the GGUF's end-of-generation tokens (eos/eot/eom). Off only for benchmarks that
    /// need a fixed token count.
    pub stop_at_eog: bool,
    /// Print control tokens' text (llama.cpp `--special`); off by default, as in llama.cpp.
    pub print_special: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 128,
            sampler: SamplerConfig::default(),
            stop_at_eog: true,
            print_special: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token was sampled (it is not part of the output text).
    EndOfGeneration(u32),
    MaxTokens,
    ContextFull,
    /// The text callback of [`generate_while`] asked to stop (its reader went away).
    Stopped,
}

#[derive(Debug, Clone)]
pub struct Generation {
    /// Sampled tokens, including a final end-of-generation token if there was one.
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    pub prompt_tokens: usize,
    /// Wall time of the prompt forward pass (and the first sample).
    pub prompt_time: Duration,
    /// Single-token forward passes after the prefill, and their wall time.
    pub decode_steps: usize,
    pub decode_time: Duration,
}

impl Generation {
    pub fn prompt_tokens_per_s(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_time)
    }

    pub fn decode_tokens_per_s(&self) -> f64 {
        rate(self.decode_steps, self.decode_time)
    }
}

fn rate(n: usize, t: Duration) -> f64 {
    if n == 0 || t.is_zero() {
        0.0
    } else {
        n as f64 / t.as_secs_f64()
    }
}

/// Generates up to `params.max_new_tokens` tokens after `prompt`, calling `on_text` with each
/// newly printable piece of text. The model's cache is reset first.
pub fn generate<M: LogitsSource>(
    model: &mut M,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_text: impl FnMut(&str),
) -> Result<Generation, GenerateError> {
    generate_while(model, tokenizer, prompt, params, |piece| {
        on_text(piece);
        true
    })
}

/// Like [`generate`], but `on_text` returns whether to go on: `false` ends generation after
/// that piece with [`StopReason::Stopped`], so a closed pipe or a gone client does not keep
/// the model running to `max_new_tokens` for nobody.
pub fn generate_while<M: LogitsSource>(
    model: &mut M,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<Generation, GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let ctx_len = model.ctx_len();
    if prompt.len() > ctx_len {
        return Err(GenerateError::PromptTooLong {
            prompt: prompt.len(),
            ctx_len,
        });
    }
    params.sampler.validate()?;
    let model_err = |e: M::Error| GenerateError::Model(Box::new(e));
    let mut sampler = Sampler::new(params.sampler.clone());
    for &t in prompt {
        sampler.accept(t);
    }
    let mut stream = tokenizer.stream(params.print_special);
    let mut out = Generation {
        tokens: Vec::new(),
        text: String::new(),
        stop: StopReason::MaxTokens,
        prompt_tokens: prompt.len(),
        prompt_time: Duration::ZERO,
        decode_steps: 0,
        decode_time: Duration::ZERO,
    };
    if params.max_new_tokens == 0 {
        return Ok(out);
    }

    let t0 = Instant::now();
    let logits = model.forward_last(prompt, 0).map_err(model_err)?;
    let mut next = sampler.sample(&logits)?;
    out.prompt_time = t0.elapsed();
    tracing::debug!(
        tokens = prompt.len(),
        secs = out.prompt_time.as_secs_f64(),
        "prefill done"
    );

    let t1 = Instant::now();
    loop {
        out.tokens.push(next);
        sampler.accept(next);
        if params.stop_at_eog && tokenizer.is_eog(next) {
            out.stop = StopReason::EndOfGeneration(next);
            break;
        }
        let piece = stream.push(next)?;
        if !piece.is_empty() {
            out.text.push_str(&piece);
            if !on_text(&piece) {
                out.stop = StopReason::Stopped;
                break;
            }
        }
        if out.tokens.len() >= params.max_new_tokens {
            out.stop = StopReason::MaxTokens;
            break;
        }
        let pos = model.cache_len();
        if pos + 1 > ctx_len {
            out.stop = StopReason::ContextFull;
            break;
        }
        let logits = model.forward_last(&[next], pos).map_err(model_err)?;
        out.decode_steps += 1;
        next = sampler.sample(&logits)?;
    }
    out.decode_time = t1.elapsed();
    let rest = stream.finish();
    if !rest.is_empty() && out.stop != StopReason::Stopped {
        on_text(&rest);
        out.text.push_str(&rest);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
