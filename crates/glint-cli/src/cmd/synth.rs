//! `glint synth OUT.gguf --dense N --moe M [--experts E] [--quant MIX]`: a GGUF with GLM-5's
//! true geometry and random weights, to benchmark real shapes without the 400 GB download.
//!
//! Quantized tensors are random values quantized by glint-quant's llama.cpp-exact quantizers:
//! one template of 2^18 values per type, repeated (from a different offset per tensor) over
//! the tensor, so a 24 GB file is written at disk speed and every block is a valid block.
//! The grid types without a quantizer (IQ2_*, IQ3_*, IQ1_S) get random codes instead, under a
//! fixed scale (`random_blocks`).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::{write_error, GgmlType, GgufWriter, SafeOutput, TensorSpec};
use glm5_model::synth::{self, Fill, Geometry, QuantMix, SynthTensor};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output GGUF path.
    pub output: PathBuf,
    /// Leading dense layers.
    #[arg(long, default_value_t = 3)]
    pub dense: usize,
    /// MoE layers after them.
    #[arg(long, default_value_t = 4)]
    pub moe: usize,
    /// Routed experts per MoE layer (GLM-5: 256; top-8 are used, or all when fewer).
    #[arg(long, default_value_t = 256)]
    pub experts: usize,
    /// `q4_k_m` (GLM-5's Q4_K_M recipe) or one GGML type for every quantizable weight.
    #[arg(long, default_value = "q4_k_m")]
    pub quant: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("--quant {0}: expected q4_k_m or a GGML type name (q8_0, q4_k, iq4_xs, ...)")]
    BadMix(String),
    #[error("--experts {0}: must be between 1 and 1024")]
    BadExperts(usize),
    #[error("--dense {dense} --moe {moe}: need at least one layer and at most 256")]
    BadLayers { dense: usize, moe: usize },
    #[error("--quant {ty}: tensor {tensor} cannot be written: {source}")]
    Quant {
        ty: GgmlType,
        tensor: String,
        source: glint_quant::QuantError,
    },
}

/// Values per quantization template.
const TEMPLATE: usize = 1 << 18;
/// Bytes written per call into the file.
const CHUNK: usize = 8 << 20;

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if args.experts == 0 || args.experts > 1024 {
        return Err(SynthError::BadExperts(args.experts).into());
    }
    let layers = args.dense + args.moe;
    if layers == 0 || layers > 256 {
        return Err(SynthError::BadLayers {
            dense: args.dense,
            moe: args.moe,
        }
        .into());
    }
    let mix = match args.quant.to_ascii_lowercase().as_str() {
        "q4_k_m" => QuantMix::Q4KM,
        name => QuantMix::Uniform(
            GgmlType::from_name(&name.to_ascii_uppercase())
                .ok_or_else(|| SynthError::BadMix(args.quant.clone()))?,
        ),
    };
    let g = Geometry::glm5(args.dense, args.moe, args.experts);
    let tensors = synth::tensors(&g, mix);
    let name = format!(
        "GLM-5 synthetic ({} dense + {} MoE layers, {} experts, {}, random weights)",
        args.dense, args.moe, args.experts, args.quant
    );
    let metadata = synth::metadata(&g, &name);
    // Templates first: an unsupported type fails before the output exists.
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let values: Vec<f32> = (0..TEMPLATE).map(|_| rng.normal() * 0.02).collect();
    let mut templates: Vec<(GgmlType, Vec<u8>)> = Vec::new();
    for t in &tensors {
        if templates.iter().any(|(ty, _)| *ty == t.ty) {
            continue;
        }
        let quant_err = |source| SynthError::Quant {
            ty: t.ty,
            tensor: t.name.clone(),
            source,
        };
        let len = glint_quant::quantized_len(t.ty, TEMPLATE).map_err(quant_err)?;
        let bytes = match random_blocks(t.ty, len, &mut rng) {
            Some(bytes) => bytes,
            None => {
                let mut bytes = vec![0u8; len];
                glint_quant::quantize(t.ty, &values, &mut bytes).map_err(quant_err)?;
                bytes
            }
        };
        templates.push((t.ty, bytes));
    }
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            ty: t.ty,
            dims: t.dims.clone(),
        })
        .collect();
    let sizes: Vec<u64> = tensors.iter().map(n_bytes).collect::<Result<_, _>>()?;
    let total: u64 = sizes.iter().sum();
    tracing::info!(
        tensors = tensors.len(),
        gib = total as f64 / (1u64 << 30) as f64,
        "writing {}",
        args.output.display()
    );

    let mut out = SafeOutput::create(&args.output, &[])?;
    let path = args.output.clone();
    let io = |e: glint_gguf::GgufError| -> Box<dyn std::error::Error + Send + Sync> {
        match e {
            glint_gguf::GgufError::Io(io) => Box::new(write_error(&path, io)),
            other => Box::new(other),
        }
    };
    let mut w = GgufWriter::new(BufWriter::new(out.file()), &metadata, &specs).map_err(io)?;
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {bytes}/{total_bytes} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for (i, t) in tensors.iter().enumerate() {
        pb.set_message(t.name.clone());
        let template = &templates.iter().find(|(ty, _)| *ty == t.ty).unwrap().1;
        let block = t.ty.type_size().max(4);
        // A different start per tensor, on a block boundary.
        let start = (i * 7919 * block) % template.len();
        w.write_tensor_with(&t.name, CHUNK, |at, buf| {
            fill(t, template, start, at, buf);
            pb.inc(buf.len() as u64);
        })
        .map_err(io)?;
    }
    w.finish()
        .map_err(io)?
        .flush()
        .map_err(|e| write_error(&path, e))?;
    out.commit()?;
    pb.finish_and_clear();
    eprintln!(
        "wrote {} ({} tensors, {:.2} GiB)",
        args.output.display(),
        tensors.len(),
        total as f64 / (1u64 << 30) as f64
    );
    Ok(())
}

fn n_bytes(t: &SynthTensor) -> Result<u64, SynthError> {
    let n: u64 = t.dims.iter().product();
    glint_quant::quantized_len(t.ty, n as usize)
        .map(|b| b as u64)
        .map_err(|source| SynthError::Quant {
            ty: t.ty,
            tensor: t.name.clone(),
            source,
        })
}

/// `len` bytes of random blocks for the grid types glint cannot quantize (their quantizers
/// search an importance-weighted grid; llama.cpp's need an imatrix): every bit pattern of
/// their codes is a valid block (each index names a grid entry, each sign field is valid),
/// once the leading f16 scale `d` of each block is made finite. None for other types.
fn random_blocks(ty: GgmlType, len: usize, rng: &mut Rng) -> Option<Vec<u8>> {
    use GgmlType::*;
    if !matches!(ty, IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S) {
        return None;
    }
    let mut bytes: Vec<u8> = (0..len.div_ceil(8))
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .take(len)
        .collect();
    // 2^-10 (2^-12 for the IQ3 grids, whose entries are larger) puts the weights' RMS near
    // the 0.02 standard deviation of the values the other types quantize.
    let d: u16 = if matches!(ty, IQ3_XXS | IQ3_S) {
        0x0c00
    } else {
        0x1400
    };
    for block in bytes.chunks_exact_mut(ty.type_size()) {
        block[..2].copy_from_slice(&d.to_le_bytes());
    }
    Some(bytes)
}

/// Bytes `at..at + buf.len()` of tensor `t`.
fn fill(t: &SynthTensor, template: &[u8], start: usize, at: u64, buf: &mut [u8]) {
    let constant = |v: f32, buf: &mut [u8]| {
        for c in buf.chunks_exact_mut(4) {
            c.copy_from_slice(&v.to_le_bytes());
        }
    };
    match t.fill {
        Fill::Ones => constant(1.0, buf),
        Fill::Zeros => buf.fill(0),
        // F32 templates are the values themselves, so random F32 tensors cycle them too.
        Fill::Random => {
            let mut pos = (start as u64 + at) as usize % template.len();
            let mut done = 0;
            while done < buf.len() {
                let n = (template.len() - pos).min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&template[pos..pos + n]);
                done += n;
                pos = 0;
            }
        }
    }
}

/// xorshift64* with Box-Muller normals: reproducible weights from `--seed`.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }
}
