//! Exact top-k over a long score row (the indexer's 2048 of up to 64k+ keys).
//!
//! [`super::router::top_k_into`] selects over indices with a comparator that reads the scores
//! through the index: at 64k keys that is a random load per comparison and ~0.5 ms per row.
//! Here each key is one `u64` whose unsigned order is the wanted order — the score's
//! `total_cmp` rank inverted in the high half, the index in the low half — so selection and the
//! final sort compare plain integers in one contiguous buffer. Same indices in the same order as
//! `top_k_into`: score descending by `total_cmp`, ties by lower index.

/// Maps `x` to a `u32` whose unsigned order is `f32::total_cmp`'s order.
#[inline]
fn total_order_bits(x: f32) -> u32 {
    let b = x.to_bits();
    // Negative floats: flip all bits (larger magnitude sorts lower); positive: set the sign bit.
    if b >> 31 == 1 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Writes the indices of the `out.len()` largest entries of `v` into `out`, best first.
/// `scratch` is reused across calls. `v.len()` must fit in `u32` and be ≥ `out.len()`.
pub(crate) fn top_k_packed_into(v: &[f32], scratch: &mut Vec<u64>, out: &mut [u32]) {
    let k = out.len();
    debug_assert!(k <= v.len() && v.len() <= u32::MAX as usize);
    if k == 0 {
        return;
    }
    scratch.clear();
    scratch.extend(
        v.iter()
            .enumerate()
            .map(|(i, &x)| (u64::from(!total_order_bits(x)) << 32) | i as u64),
    );
    if k < scratch.len() {
        scratch.select_nth_unstable(k - 1);
    }
    let best = &mut scratch[..k];
    best.sort_unstable();
    for (o, &key) in out.iter_mut().zip(best.iter()) {
        *o = key as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition: a stable sort of all indices by score descending under `total_cmp`
    /// (stable, so equal scores keep ascending index), then the first k.
    fn by_definition(v: &[f32], k: usize) -> Vec<u32> {
        let mut idx: Vec<u32> = (0..v.len() as u32).collect();
        idx.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]));
        idx.truncate(k);
        idx
    }

    fn check(v: &[f32], k: usize) {
        let mut scratch = Vec::new();
        let mut out = vec![u32::MAX; k];
        top_k_packed_into(v, &mut scratch, &mut out);
        assert_eq!(out, by_definition(v, k), "k {k} of {}", v.len());
    }

    #[test]
    fn special_values_and_ties() {
        let v = [
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1.0,
            f32::MAX,
            f32::MIN,
        ];
        for k in 0..=v.len() {
            check(&v, k);
        }
    }

    proptest! {
        /// Few distinct values, so ties are common.
        #[test]
        fn equals_definition(
            v in proptest::collection::vec(-4i8..4, 1..600),
            frac in 0.0f64..=1.0,
        ) {
            let v: Vec<f32> = v.iter().map(|&x| f32::from(x) * 0.5).collect();
            let k = ((v.len() as f64) * frac) as usize;
            check(&v, k);
        }

        #[test]
        fn any_bits(bits in proptest::collection::vec(any::<u32>(), 1..300), k in 0usize..300) {
            let v: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
            check(&v, k.min(v.len()));
        }
    }
}
