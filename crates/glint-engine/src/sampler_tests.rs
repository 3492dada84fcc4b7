//! Expected values below are worked out by hand (probabilities chosen so the arithmetic is
//! exact), not produced by the code under test.

use super::*;

fn cands_from_probs(probs: &[f32]) -> Vec<Candidate> {
    probs
        .iter()
        .enumerate()
        .map(|(i, p)| Candidate {
            id: i as u32,
            logit: p.ln(),
        })
        .collect()
}

fn ids(c: &[Candidate]) -> Vec<u32> {
    c.iter().map(|c| c.id).collect()
}

#[test]
fn top_p_keeps_the_token_that_crosses_the_mass() {
    // Probabilities (shuffled ids): id2 0.5, id0 0.3, id3 0.15, id1 0.05.
    let base = cands_from_probs(&[0.3, 0.05, 0.5, 0.15]);
    let mut c = base.clone();
    top_p(&mut c, 0.45);
    assert_eq!(ids(&c), vec![2]); // 0.5 >= 0.45 already
    let mut c = base.clone();
    top_p(&mut c, 0.75);
    assert_eq!(ids(&c), vec![2, 0]); // 0.5 < 0.75 <= 0.8
    let mut c = base.clone();
    top_p(&mut c, 0.9);
    assert_eq!(ids(&c), vec![2, 0, 3]); // 0.8 < 0.9 <= 0.95
    let mut c = base.clone();
    top_p(&mut c, 1.0);
    assert_eq!(c.len(), 4);
}

#[test]
fn min_p_is_relative_to_the_top_probability() {
    let base = cands_from_probs(&[0.3, 0.05, 0.5, 0.15]);
    // min_p 0.2: threshold 0.1 -> drops only 0.05.
    let mut c = base.clone();
    min_p(&mut c, 0.2);
    let mut got = ids(&c);
    got.sort();
    assert_eq!(got, vec![0, 2, 3]);
    // min_p 0.7: threshold 0.35 -> only 0.5 survives.
    let mut c = base.clone();
    min_p(&mut c, 0.7);
    assert_eq!(ids(&c), vec![2]);
    // min_p > 1 still keeps the top token.
    let mut c = base.clone();
    min_p(&mut c, 3.0);
    assert_eq!(ids(&c), vec![2]);
}

#[test]
fn repeat_penalty_divides_positive_and_multiplies_negative() {
    let mut c: Vec<Candidate> = [2.0f32, -1.0, 0.5, 3.0]
        .iter()
        .enumerate()
        .map(|(i, &l)| Candidate {
            id: i as u32,
            logit: l,
        })
        .collect();
    // Token 1 occurs twice but is penalised once (llama.cpp semantics).
    apply_repeat_penalty(&mut c, &[0, 1, 1], 2.0);
    let logits: Vec<f32> = c.iter().map(|c| c.logit).collect();
    assert_eq!(logits, vec![1.0, -2.0, 0.5, 3.0]);
}

#[test]
fn top_k_keeps_the_k_largest_sorted() {
    let mut c = cands_from_probs(&[0.3, 0.05, 0.5, 0.15]);
    top_k(&mut c, 2);
    assert_eq!(ids(&c), vec![2, 0]);
    let mut c = cands_from_probs(&[0.3, 0.05, 0.5, 0.15]);
    top_k(&mut c, 0);
    assert_eq!(ids(&c), vec![2, 0, 3, 1]);
}

#[test]
fn temperature_scales_logits_before_softmax() {
    let c = [
        Candidate { id: 0, logit: 0.0 },
        Candidate {
            id: 1,
            logit: 2f32.ln(),
        },
    ];
    let p = softmax_with_temperature(&c, 1.0);
    assert!((p[0] - 1.0 / 3.0).abs() < 1e-7 && (p[1] - 2.0 / 3.0).abs() < 1e-7);
    // T = 2: weights 1 and sqrt(2).
    let p = softmax_with_temperature(&c, 2.0);
    let s2 = 2f64.sqrt();
    assert!((p[0] - 1.0 / (1.0 + s2)).abs() < 1e-7);
    assert!((p[1] - s2 / (1.0 + s2)).abs() < 1e-7);
}

#[test]
fn draw_inverts_the_cdf() {
    let p = [0.2, 0.5, 0.3];
    assert_eq!(draw(&p, 0.0), 0);
    assert_eq!(draw(&p, 0.19), 0);
    assert_eq!(draw(&p, 0.21), 1);
    assert_eq!(draw(&p, 0.69), 1);
    assert_eq!(draw(&p, 0.71), 2);
    assert_eq!(draw(&p, 0.999_999), 2);
}

#[test]
fn splitmix64_matches_the_reference_sequence() {
    // Published test vector for splitmix64 seeded with 1234567.
    let mut r = SplitMix64::new(1234567);
    let want: [u64; 5] = [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
        4593380528125082431,
        16408922859458223821,
    ];
    for w in want {
        assert_eq!(r.next_u64(), w);
    }
}

#[test]
fn greedy_takes_argmax_after_penalty() {
    let mut s = Sampler::new(SamplerConfig {
        repeat_penalty: 4.0,
        ..SamplerConfig::greedy()
    });
    let logits = [1.0, 3.0, 2.0];
    assert_eq!(s.sample(&logits).unwrap(), 1);
    s.accept(1);
    // 3.0 / 4 = 0.75 < 2.0
    assert_eq!(s.sample(&logits).unwrap(), 2);
    assert!(s.sample(&[]).is_err());
}

#[test]
fn penalty_window_forgets_old_tokens() {
    let mut s = Sampler::new(SamplerConfig {
        repeat_penalty: 4.0,
        repeat_last_n: 2,
        ..SamplerConfig::greedy()
    });
    let logits = [1.0, 3.0, 2.0];
    s.accept(1);
    s.accept(0);
    s.accept(0); // token 1 has left the 2-token window
    assert_eq!(s.sample(&logits).unwrap(), 1);
}

#[test]
fn seeded_sampling_is_deterministic_and_seed_dependent() {
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplerConfig::default()
    };
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let run = |seed| {
        let mut s = Sampler::new(SamplerConfig {
            seed,
            ..cfg.clone()
        });
        (0..64)
            .map(|_| s.sample(&logits).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn draws_follow_the_truncated_distribution() {
    // Probabilities 0.5, 0.3, 0.15, 0.05; top_p 0.75 leaves {0.5, 0.3}, renormalised to
    // 0.625 / 0.375.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let mut s = Sampler::new(SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 0.75,
        min_p: 0.0,
        seed: 42,
        ..SamplerConfig::default()
    });
    let n = 20_000;
    let mut counts = [0usize; 4];
    for _ in 0..n {
        counts[s.sample(&logits).unwrap() as usize] += 1;
    }
    assert_eq!(counts[2] + counts[3], 0);
    let f0 = counts[0] as f64 / n as f64;
    // 4.5 standard deviations of a binomial(20000, 0.625) proportion is about 0.0154.
    assert!((f0 - 0.625).abs() < 0.016, "f0 = {f0}");
}

#[test]
fn non_finite_logits_are_an_error_never_a_token() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for cfg in [SamplerConfig::greedy(), SamplerConfig::default()] {
            let mut s = Sampler::new(cfg);
            match s.sample(&[0.5, 2.0, bad, 1.0]) {
                Err(SampleError::NonFiniteLogit { token: 2, value }) => {
                    assert_eq!(value.to_bits(), bad.to_bits())
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
    assert_eq!(first_non_finite(&[1.0, 2.0]), None);
}

#[test]
fn settings_outside_their_range_are_named() {
    let bad = [
        (
            "temp",
            SamplerConfig {
                temperature: f32::NAN,
                ..SamplerConfig::default()
            },
        ),
        (
            "top-p",
            SamplerConfig {
                top_p: f32::NAN,
                ..SamplerConfig::default()
            },
        ),
        (
            "top-p",
            SamplerConfig {
                top_p: 1.5,
                ..SamplerConfig::default()
            },
        ),
        (
            "min-p",
            SamplerConfig {
                min_p: -0.1,
                ..SamplerConfig::default()
            },
        ),
        (
            "repeat-penalty",
            SamplerConfig {
                repeat_penalty: 0.0,
                ..SamplerConfig::default()
            },
        ),
        (
            "repeat-penalty",
            SamplerConfig {
                repeat_penalty: f32::INFINITY,
                ..SamplerConfig::default()
            },
        ),
    ];
    for (name, cfg) in bad {
        match cfg.validate() {
            Err(e @ SampleError::BadSetting { name: n, .. }) => {
                assert_eq!(n, name);
                assert!(e.to_string().starts_with(&format!("--{name} ")), "{e}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // Negative temperature is greedy, not an error; the defaults and greedy are valid.
    let neg = SamplerConfig {
        temperature: -1.0,
        ..SamplerConfig::default()
    };
    assert!(neg.validate().is_ok());
    assert!(SamplerConfig::default().validate().is_ok());
    assert!(SamplerConfig::greedy().validate().is_ok());
}

#[test]
fn presence_and_frequency_penalties_count_the_drawn_tokens_only() {
    // logit -= presence * [count > 0] + frequency * count, over tokens drawn (not accepted
    // prompt tokens): by hand, with presence 0.5 and frequency 0.75.
    let mut s = Sampler::new(SamplerConfig {
        presence_penalty: 0.5,
        frequency_penalty: 0.75,
        ..SamplerConfig::greedy()
    });
    s.accept(0); // a prompt token: no penalty
    let logits = [3.0, 2.9, 1.0];
    // Draw 1: nothing drawn yet → token 0 (3.0).
    assert_eq!(s.sample(&logits).unwrap(), 0);
    // Draw 2: token 0 at 3.0 - 0.5 - 0.75 = 1.75 < 2.9 → token 1.
    assert_eq!(s.sample(&logits).unwrap(), 1);
    // Draw 3: 0 → 1.75, 1 → 2.9 - 1.25 = 1.65, 2 → 1.0 → token 0 again.
    assert_eq!(s.sample(&logits).unwrap(), 0);
    // Draw 4: 0 → 3.0 - 0.5 - 1.5 = 1.0, 1 → 1.65, 2 → 1.0 → token 1.
    assert_eq!(s.sample(&logits).unwrap(), 1);
    // Draw 5: 0 → 1.0, 1 → 2.9 - 0.5 - 1.5 = 0.9, 2 → 1.0 → token 0 (ties: lowest id).
    assert_eq!(s.sample(&logits).unwrap(), 0);

    // Negative penalties favour repeats.
    let mut s = Sampler::new(SamplerConfig {
        presence_penalty: -1.0,
        ..SamplerConfig::greedy()
    });
    let logits = [1.0, 1.5];
    assert_eq!(s.sample(&logits).unwrap(), 1);
    assert_eq!(s.sample(&[2.0, 1.5]).unwrap(), 1, "1.5 + 1 > 2.0");

    let bad = SamplerConfig {
        frequency_penalty: f32::NAN,
        ..SamplerConfig::default()
    };
    assert!(bad.validate().is_err());
}
