//! glint-quant's lookup tables (IQ grids, signs, non-linear levels) written out as CUDA arrays,
//! prepended to kernels/quant.cu: one definition of each table, the Rust one.
//!
//! The arrays are `__device__ const` (global memory, read through the L1 / read-only cache)
//! rather than `__constant__`: the IQ kernels index them with a different value in every lane,
//! which the constant cache serialises (one address per cycle), as llama.cpp's CUDA backend also
//! avoids. Together they are about 34 KiB.

use std::fmt::Write;

use glint_quant::grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
    KVALUES_IQ4NL, KVALUES_MXFP4,
};

/// One array `name[len]` of C type `cty`, eight values a line, each written by `fmt`.
fn array<T: Copy>(out: &mut String, cty: &str, name: &str, vals: &[T], fmt: impl Fn(T) -> String) {
    let _ = writeln!(out, "__device__ const {cty} {name}[{}] = {{", vals.len());
    for chunk in vals.chunks(8) {
        let line: Vec<String> = chunk.iter().map(|&v| fmt(v)).collect();
        let _ = writeln!(out, "    {},", line.join(", "));
    }
    out.push_str("};\n");
}

/// The CUDA source text of every table kernels/quant.cu reads.
pub fn cuda_tables() -> String {
    let mut s =
        String::from("\n// ---- tables generated from glint_quant::grids (quant_tables.rs) ----\n");
    let h64 = |v: u64| format!("0x{v:016x}ull");
    let h32 = |v: u32| format!("0x{v:08x}u");
    array(&mut s, "u64", "iq2xxs_grid", &IQ2XXS_GRID, h64);
    array(&mut s, "u64", "iq2xs_grid", &IQ2XS_GRID, h64);
    array(&mut s, "u64", "iq2s_grid", &IQ2S_GRID, h64);
    array(&mut s, "u64", "iq1s_grid", &IQ1S_GRID, h64);
    array(&mut s, "u32", "iq3xxs_grid", &IQ3XXS_GRID, h32);
    array(&mut s, "u32", "iq3s_grid", &IQ3S_GRID, h32);
    array(&mut s, "u8", "ksigns_iq2xs", &KSIGNS_IQ2XS, |v| {
        format!("{v}")
    });
    array(&mut s, "i8", "kvalues_iq4nl", &KVALUES_IQ4NL, |v| {
        format!("{v}")
    });
    array(&mut s, "i8", "kvalues_mxfp4", &KVALUES_MXFP4, |v| {
        format!("{v}")
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the array `name` back out of the generated text, as signed 128-bit integers.
    fn parse(text: &str, name: &str) -> Vec<i128> {
        let start = text
            .find(&format!(" {name}["))
            .unwrap_or_else(|| panic!("{name} missing"));
        let body = &text[start..];
        let open = body.find('{').expect("opening brace") + 1;
        let close = body.find("};").expect("closing brace");
        body[open..close]
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                let t = t.trim_end_matches("ull").trim_end_matches('u');
                match t.strip_prefix("0x") {
                    Some(h) => i128::from_str_radix(h, 16).expect("hex"),
                    None => t.parse::<i128>().expect("decimal"),
                }
            })
            .collect()
    }

    /// The text encodes every table value for value (independently parsed, not re-generated),
    /// and the declared lengths match.
    #[test]
    fn tables_parse_back() {
        let text = cuda_tables();
        let check = |name: &str, want: Vec<i128>| {
            let got = parse(&text, name);
            assert_eq!(got.len(), want.len(), "{name} length");
            assert!(
                text.contains(&format!("{name}[{}]", want.len())),
                "{name} decl"
            );
            assert_eq!(got, want, "{name}");
        };
        check(
            "iq2xxs_grid",
            IQ2XXS_GRID.iter().map(|&v| v as i128).collect(),
        );
        check(
            "iq2xs_grid",
            IQ2XS_GRID.iter().map(|&v| v as i128).collect(),
        );
        check("iq2s_grid", IQ2S_GRID.iter().map(|&v| v as i128).collect());
        check("iq1s_grid", IQ1S_GRID.iter().map(|&v| v as i128).collect());
        check(
            "iq3xxs_grid",
            IQ3XXS_GRID.iter().map(|&v| v as i128).collect(),
        );
        check("iq3s_grid", IQ3S_GRID.iter().map(|&v| v as i128).collect());
        check(
            "ksigns_iq2xs",
            KSIGNS_IQ2XS.iter().map(|&v| v as i128).collect(),
        );
        check(
            "kvalues_iq4nl",
            KVALUES_IQ4NL.iter().map(|&v| v as i128).collect(),
        );
        check(
            "kvalues_mxfp4",
            KVALUES_MXFP4.iter().map(|&v| v as i128).collect(),
        );
        // Spot values known from ggml-common.h, independent of the Rust tables.
        assert_eq!(parse(&text, "iq2xxs_grid")[0], 0x0808080808080808);
        assert_eq!(parse(&text, "kvalues_iq4nl")[0], -127);
        assert_eq!(parse(&text, "kvalues_iq4nl")[15], 113);
        assert_eq!(parse(&text, "ksigns_iq2xs")[127], 255);
        assert_eq!(parse(&text, "iq1s_grid")[0], 0xffffffffffffffff);
    }
}
