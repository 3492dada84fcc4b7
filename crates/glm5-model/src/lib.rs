//! GLM-5 from GGUF files: configuration, forward pass, tokenizer, chat template, samplers and
//! the generation loop.

pub mod chat;
pub mod sampler;
pub mod tokenizer;
