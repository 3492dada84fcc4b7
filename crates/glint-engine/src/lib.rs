//! What an application needs around the GLM-5 model: the GGUF's tokenizer, its chat template,
//! samplers, the generation loop, and the continuous-batching scheduler a server drives. Kept apart from `glm5-model` so the model crate holds
//! only the model (config, weights, the batched step) and the CLI, the examples and the server
//! share one application layer.

pub mod chat;
pub mod generate;
pub mod prefix_cache;
pub mod sampler;
pub mod scheduler;
pub mod tokenizer;
