//! Saying where a NaN or infinity came from when the logits contain one: the forward pass is
//! run again over the same tokens with a tap on every trunk layer, and the first layer (and
//! sublayer) whose hidden states are not finite is named. This costs one more forward pass, and
//! only after the failure.

use glm5_model::{Backend, Glm5, Tap};

#[derive(Debug, thiserror::Error)]
#[error(
    "the model produced a non-finite logit ({value} at position {pos}, token {token}); {origin}"
)]
pub struct NonFiniteLogits {
    pub pos: usize,
    pub token: usize,
    pub value: f32,
    pub origin: String,
}

/// `Ok` if every logit of `logits` (`rows × n_vocab`) is finite; otherwise the error, with the
/// first layer where a non-finite value appears when running `tokens` from position 0.
pub fn check<B: Backend>(
    model: &mut Glm5<'_, B>,
    tokens: &[u32],
    logits: &[f32],
    n_vocab: usize,
) -> Result<(), NonFiniteLogits> {
    let Some((i, value)) = glint_engine::sampler::first_non_finite(logits) else {
        return Ok(());
    };
    Err(NonFiniteLogits {
        pos: i / n_vocab.max(1),
        token: i % n_vocab.max(1),
        value,
        origin: locate(model, tokens),
    })
}

/// Describes the first trunk layer with non-finite hidden states over `tokens`.
pub fn locate<B: Backend>(model: &mut Glm5<'_, B>, tokens: &[u32]) -> String {
    model.reset();
    let mut first: Option<(Tap, usize)> = None;
    let mut tap = |t: Tap, layer: usize, h: &mut [f32]| {
        if first.is_none() && h.iter().any(|x| !x.is_finite()) {
            first = Some((t, layer));
        }
    };
    let rerun = model.forward_tapped(tokens, 0, &mut tap);
    model.reset();
    match (rerun, first) {
        (Err(e), _) => format!("could not rerun the forward pass to locate it: {e}"),
        (Ok(_), Some((Tap::FfnInput, l))) => {
            format!("it first appears in layer {l}, after attention (blk.{l}.attn_*)")
        }
        (Ok(_), Some((Tap::LayerOutput, l))) => {
            format!("it first appears in layer {l}, after the feed-forward block (blk.{l}.ffn_*)")
        }
        (Ok(_), None) => "every layer's hidden states are finite: it appears in the output norm \
                          or output head (output_norm.weight, output.weight)"
            .to_string(),
    }
}
