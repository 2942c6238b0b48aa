//! How a round aggregates: the method, its parameters and the update hygiene (clipping, noise),
//! each checked once, here, before a round starts.

/// The aggregation method (definitions as Flower's `flwr.server.strategy.aggregate` functions).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// The weighted mean.
    FedAvg,
    /// The coordinate-wise median (numpy's: the mean of the two middle values for even counts).
    Median,
    /// The coordinate-wise mean without `int(trim × n)` values at each side.
    TrimmedMean {
        /// The share cut at each side, in [0, 0.5).
        trim: f64,
    },
    /// The upload with the smallest Krum score.
    Krum {
        /// f: the attackers tolerated.
        byzantine: usize,
    },
    /// The weighted mean of the `keep` uploads with the smallest Krum scores.
    MultiKrum {
        /// f: the attackers tolerated.
        byzantine: usize,
        /// How many to average (default n - f).
        keep: Option<usize>,
    },
    /// Bulyan: n - 2f rounds of Krum, then per coordinate the mean of the n - 4f values closest
    /// to the selection's median.
    Bulyan {
        /// f: the attackers tolerated.
        byzantine: usize,
    },
}

impl Method {
    /// The method's name as the API spells it (`fedavg`, `median`, `trimmed_mean`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Method::FedAvg => "fedavg",
            Method::Median => "median",
            Method::TrimmedMean { .. } => "trimmed_mean",
            Method::Krum { .. } => "krum",
            Method::MultiKrum { .. } => "multi_krum",
            Method::Bulyan { .. } => "bulyan",
        }
    }

    /// Whether the method compares uploads by their pairwise distances (Krum's family).
    pub(crate) fn uses_distances(&self) -> bool {
        matches!(self, Method::Krum { .. } | Method::MultiKrum { .. } | Method::Bulyan { .. })
    }

    /// The fewest accepted uploads the method can aggregate, and why.
    pub fn needs(&self) -> (usize, String) {
        match *self {
            Method::Bulyan { byzantine } => {
                let n = byzantine.saturating_mul(4).saturating_add(3);
                (n, format!("bulyan with byzantine = {byzantine} needs at least 4 * byzantine + 3 = {n} accepted uploads"))
            }
            Method::MultiKrum { byzantine, keep: None } => {
                let n = byzantine.saturating_add(1);
                (n, format!("multi_krum with byzantine = {byzantine} keeps n - byzantine uploads: it needs at least {n} accepted uploads"))
            }
            Method::MultiKrum { byzantine, keep: Some(keep) } => {
                let n = keep.max(byzantine.saturating_add(1));
                (n, format!("multi_krum with keep = {keep} and byzantine = {byzantine} needs at least {n} accepted uploads"))
            }
            _ => (1, format!("{} needs at least 1 accepted upload", self.name())),
        }
    }
}

/// `trim` (the share a trimmed mean cuts at each side) in [0, 0.5); checked whatever the method,
/// so that a wrong value is found when it is given, not when the method changes.
pub fn check_trim(trim: f64) -> Result<(), String> {
    if !(0.0..0.5).contains(&trim) {
        return Err(format!("trim must be in [0, 0.5) (the share cut at each side); got {trim}"));
    }
    Ok(())
}

/// Everything about a round but its uploads and its reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The aggregation method.
    pub method: Method,
    /// Each update is scaled to an L2 norm of at most this (over all averaged tensors).
    pub clip_norm: Option<f64>,
    /// Gaussian noise of standard deviation `noise_multiplier × clip_norm / n` on the aggregate.
    pub noise_multiplier: Option<f64>,
    /// The noise's seed (None: drawn from the operating system once per round).
    pub seed: Option<u64>,
    /// At most this many bytes per upload (checkpoint and external data together).
    pub max_bytes: Option<u64>,
    /// Bytes of values read across all uploads at a time by the robust methods.
    pub chunk_bytes: usize,
}

/// The smallest `chunk_bytes`: one float64 value.
pub const MIN_CHUNK_BYTES: usize = 8;

impl Options {
    /// FedAvg with these defaults: no hygiene, no size limit, 64 MiB chunks.
    pub fn fedavg() -> Options {
        Options {
            method: Method::FedAvg,
            clip_norm: None,
            noise_multiplier: None,
            seed: None,
            max_bytes: None,
            chunk_bytes: 64 << 20,
        }
    }

    /// Plain FedAvg: one pass, no upload kept after it is added.
    pub fn plain(&self) -> bool {
        self.method == Method::FedAvg && self.clip_norm.is_none() && self.noise_multiplier.is_none()
    }

    /// Every option in its range: a message naming the option and its value when one is not.
    pub fn check(&self) -> Result<(), String> {
        if let Method::TrimmedMean { trim } = self.method {
            check_trim(trim)?;
        }
        if let Method::MultiKrum { keep: Some(0), .. } = self.method {
            return Err("keep must be >= 1; got 0".into());
        }
        if let Some(c) = self.clip_norm {
            if !(c.is_finite() && c > 0.0) {
                return Err(format!("clip_norm must be a positive finite number; got {c}"));
            }
        }
        if let Some(z) = self.noise_multiplier {
            if self.clip_norm.is_none() {
                return Err(
                    "noise_multiplier needs clip_norm (the noise scales with the clipping norm)".into()
                );
            }
            if !(z.is_finite() && z >= 0.0) {
                return Err(format!("noise_multiplier must be a finite number >= 0; got {z}"));
            }
            if let Some(c) = self.clip_norm {
                // the noise's standard deviation is their product: it must be a number too
                if !(z * c).is_finite() {
                    return Err(format!(
                        "noise_multiplier × clip_norm overflows float64 (the noise's standard deviation); got {z} × {c}"
                    ));
                }
            }
        }
        if self.max_bytes == Some(0) {
            return Err("max_bytes must be positive, got 0".into());
        }
        if self.chunk_bytes < MIN_CHUNK_BYTES {
            return Err(format!("chunk_bytes must be at least {MIN_CHUNK_BYTES}; got {}", self.chunk_bytes));
        }
        Ok(())
    }

    /// The noise's standard deviation for `n` accepted uploads (Flower's `compute_stdv`).
    pub(crate) fn noise_std(&self, n: usize) -> Option<f64> {
        match (self.noise_multiplier, self.clip_norm) {
            (Some(z), Some(c)) if n > 0 => Some(z * c / n as f64),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_out_of_range_is_named() {
        let with = |f: &dyn Fn(&mut Options)| {
            let mut o = Options::fedavg();
            f(&mut o);
            o.check()
        };
        assert!(with(&|_| ()).is_ok());
        for (bad, word) in [
            (with(&|o| o.method = Method::TrimmedMean { trim: 0.5 }), "trim"),
            (with(&|o| o.method = Method::TrimmedMean { trim: f64::NAN }), "trim"),
            (with(&|o| o.method = Method::TrimmedMean { trim: -0.1 }), "trim"),
            (with(&|o| o.method = Method::MultiKrum { byzantine: 0, keep: Some(0) }), "keep"),
            (with(&|o| o.clip_norm = Some(f64::INFINITY)), "clip_norm"),
            (with(&|o| o.clip_norm = Some(f64::NAN)), "clip_norm"),
            (with(&|o| o.clip_norm = Some(0.0)), "clip_norm"),
            (with(&|o| o.noise_multiplier = Some(1.0)), "needs clip_norm"),
            (
                with(&|o| {
                    o.clip_norm = Some(1.0);
                    o.noise_multiplier = Some(f64::NAN)
                }),
                "noise_multiplier",
            ),
            (
                with(&|o| {
                    o.clip_norm = Some(1.0);
                    o.noise_multiplier = Some(-1.0)
                }),
                "noise_multiplier",
            ),
            (
                with(&|o| {
                    o.clip_norm = Some(1e300);
                    o.noise_multiplier = Some(1e300)
                }),
                "overflows",
            ),
            (with(&|o| o.max_bytes = Some(0)), "max_bytes"),
            (with(&|o| o.chunk_bytes = 7), "chunk_bytes"),
        ] {
            let message = bad.expect_err(word);
            assert!(message.contains(word), "{message}");
        }
    }

    #[test]
    fn each_method_says_how_many_uploads_it_needs() {
        assert_eq!(Method::Bulyan { byzantine: 1 }.needs().0, 7);
        assert_eq!(Method::Krum { byzantine: 3 }.needs().0, 1);
        assert_eq!(Method::MultiKrum { byzantine: 3, keep: None }.needs().0, 4);
        assert_eq!(Method::MultiKrum { byzantine: 1, keep: Some(5) }.needs().0, 5);
        assert_eq!(Method::Median.needs().0, 1);
        assert!(Method::Bulyan { byzantine: usize::MAX }.needs().0 == usize::MAX);
    }
}
