//! The Gaussian noise of central differential privacy (Flower's `add_gaussian_noise_to_params`:
//! standard deviation `noise_multiplier × clip_norm / n`), drawn so that a coordinate's noise
//! depends on (seed, tensor, position) only: ChaCha12 in counter mode, one stream per tensor, two
//! 64-bit words per pair of coordinates turned into two normal values by Box–Muller. A cluster's
//! tasks, each adding the noise of its own coordinates, and one machine adding all of it give the
//! same aggregate, bit for bit.
//!
//! Like Flower's (numpy's sampler), this is not hardened against floating-point attacks on the
//! privacy guarantee (Mironov, CCS 2012): the noise is what the definition asks, not a
//! certified sampler.

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

use crate::parallel::in_parallel;

/// Coordinates per piece of parallel work (each piece seeks its own place in the stream).
const PIECE: usize = 1 << 16;

/// A uniform value in (0, 1] from 53 random bits (never 0: its logarithm is taken).
fn open_unit(bits: u64) -> f64 {
    ((bits >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The two normal values of pair `k` are made from words `4k..4k + 4` of the tensor's stream.
fn fill_pairs(rng: &mut ChaCha12Rng, first: usize, out: &mut [f64], std: f64) {
    let mut lane = first;
    let mut i = 0;
    rng.set_word_pos(4 * (first / 2) as u128);
    while i < out.len() {
        let radius = (-2.0 * open_unit(rng.next_u64()).ln()).sqrt();
        let angle = std::f64::consts::TAU * open_unit(rng.next_u64());
        let pair = [radius * angle.cos(), radius * angle.sin()];
        let from = lane % 2;
        for z in pair.iter().skip(from) {
            if let Some(o) = out.get_mut(i) {
                *o += std * z;
            }
            i += 1;
            lane += 1;
            if i >= out.len() {
                break;
            }
        }
    }
}

/// Adds the noise of coordinates `first..first + out.len()` of tensor `slot` (standard deviation
/// `std`, the round's `seed`) to `out`.
pub fn add_noise(seed: u64, std: f64, slot: usize, first: usize, out: &mut [f64]) {
    let pieces: Vec<(usize, &mut [f64])> =
        out.chunks_mut(PIECE).enumerate().map(|(p, part)| (first + p * PIECE, part)).collect();
    let bytes = pieces.iter().map(|(_, p)| p.len() * 8).sum();
    in_parallel(pieces, bytes, |(start, part)| {
        let mut rng = ChaCha12Rng::seed_from_u64(seed);
        rng.set_stream(slot as u64);
        fill_pairs(&mut rng, start, part, std);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinate_s_noise_does_not_depend_on_how_the_tensor_is_split() {
        let n = 3 * PIECE + 17;
        let mut whole = vec![0.0; n];
        add_noise(7, 1.0, 2, 0, &mut whole);
        for split in [1usize, 2, 3, 1000, PIECE - 1, PIECE + 1] {
            let mut parts = vec![0.0; n];
            let (a, b) = parts.split_at_mut(split);
            add_noise(7, 1.0, 2, 0, a);
            add_noise(7, 1.0, 2, split, b);
            assert_eq!(parts, whole, "split at {split}");
        }
        let mut other_slot = vec![0.0; 8];
        add_noise(7, 1.0, 3, 0, &mut other_slot);
        assert_ne!(other_slot[..], whole[..8]);
        let mut other_seed = vec![0.0; 8];
        add_noise(8, 1.0, 2, 0, &mut other_seed);
        assert_ne!(other_seed[..], whole[..8]);
    }

    #[test]
    fn the_noise_is_normal_with_the_asked_deviation() {
        let n = 400_000;
        let mut x = vec![0.0; n];
        add_noise(1, 0.25, 0, 0, &mut x);
        let mean = x.iter().sum::<f64>() / n as f64;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.002, "{mean}");
        assert!((var.sqrt() - 0.25).abs() < 0.002, "{}", var.sqrt());
        // tails of a normal: about 4.55 % beyond 2 sigma, 0.27 % beyond 3
        let beyond = |k: f64| x.iter().filter(|v| v.abs() > k * 0.25).count() as f64 / n as f64;
        assert!((beyond(2.0) - 0.0455).abs() < 0.003, "{}", beyond(2.0));
        assert!((beyond(3.0) - 0.0027).abs() < 0.001, "{}", beyond(3.0));
        assert!(x.iter().all(|v| v.is_finite()));
    }
}
