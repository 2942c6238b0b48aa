//! The FedAvg sums of a round and the overflow rule, in one place: float64 sums of
//! `weight × value` per averaged tensor, a bound on each sum's magnitude (see `kernel.rs`), and
//! the total weight (finite whatever the number of uploads: every weight is at most 2^64, see
//! `structure::weight_problem`).

use std::collections::HashSet;

use super::super::kernel::{accumulate, check_values};
use super::super::round::add_files;
use super::super::structure::{Layout, Located};
use super::super::verdict::{FileItem, Verdict};
use super::super::Rejection;
use crate::Error;

/// The sums of a round (see the module note).
pub(super) struct Tally {
    lanes: Vec<usize>,
    /// One vector of sums per slot (each its own allocation, so that the result can be rounded
    /// slot by slot, freeing each slot's sums as it goes); None until needed (the robust methods
    /// make them only when an upload could overflow them).
    sums: Option<Vec<Vec<f64>>>,
    /// Per slot: a bound on the magnitude of its sums.
    pub(super) bounds: Vec<f64>,
    /// The sum of the accepted weights.
    pub(super) total_weight: f64,
}

/// `n` zeros, written here, on this thread. Not `vec![0.0; n]`: that asks the allocator for
/// memory the kernel maps lazily to a shared zero page, and the first write to each page by the
/// kernel's threads is then a copy-on-write fault with a TLB shootdown to every core (it was half
/// the time of a round of large uploads).
pub(crate) fn written_zeros(n: usize) -> Vec<f64> {
    crate::platform::huge_f64s(n, true)
}

/// Per-slot mutable views of per-slot vectors.
pub(crate) fn slot_views(sums: &mut [Vec<f64>]) -> Vec<&mut [f64]> {
    sums.iter_mut().map(|v| v.as_mut_slice()).collect()
}

/// Per-slot vectors of a flat vector (`lanes` per slot).
pub(crate) fn split_slots(flat: &[f64], lanes: &[usize]) -> Vec<Vec<f64>> {
    let mut out = Vec::with_capacity(lanes.len());
    let mut start = 0usize;
    for &n in lanes {
        out.push(flat.get(start..start.saturating_add(n)).unwrap_or_default().to_vec());
        start = start.saturating_add(n);
    }
    out
}

impl Tally {
    pub(super) fn new(lanes: &[usize]) -> Tally {
        Tally { lanes: lanes.to_vec(), sums: None, bounds: vec![0.0; lanes.len()], total_weight: 0.0 }
    }

    /// The sums (None when never made), the bounds and the total weight.
    pub(super) fn into_parts(self) -> (Option<Vec<Vec<f64>>>, Vec<f64>, f64) {
        (self.sums, self.bounds, self.total_weight)
    }

    pub(super) fn from_parts(
        lanes: &[usize],
        sums: Vec<Vec<f64>>,
        bounds: Vec<f64>,
        total_weight: f64,
    ) -> Tally {
        Tally { lanes: lanes.to_vec(), sums: Some(sums), bounds, total_weight }
    }

    pub(super) fn has_sums(&self) -> bool {
        self.sums.is_some()
    }

    /// Installs sums made from the uploads kept so far (their bounds become exact).
    pub(super) fn set_sums(&mut self, sums: Vec<Vec<f64>>) {
        for (bound, part) in self.bounds.iter_mut().zip(&sums) {
            *bound = part.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        }
        self.sums = Some(sums);
    }

    /// The sums, made (zeros, written: [`written_zeros`]) when first needed.
    fn sums_mut(&mut self) -> &mut Vec<Vec<f64>> {
        let lanes = &self.lanes;
        self.sums.get_or_insert_with(|| lanes.iter().map(|&n| written_zeros(n)).collect())
    }

    /// Plain FedAvg over local files: the file kernels check and add them (every core).
    pub(super) fn add_files(
        &mut self,
        items: &[FileItem],
        layout: &Layout,
        max_bytes: Option<u64>,
        seen: &mut HashSet<(u64, u64)>,
    ) -> Result<Vec<Verdict>, Error> {
        let mut bounds = std::mem::take(&mut self.bounds);
        let sums = self.sums_mut();
        let mut views = slot_views(sums);
        let verdicts = add_files(items, layout, max_bytes, seen, &mut views, &mut bounds, &mut || true);
        self.bounds = bounds;
        if let Ok(verdicts) = &verdicts {
            for v in verdicts {
                if let Verdict::Added { weight, .. } = v {
                    self.total_weight += weight;
                }
            }
        }
        verdicts
    }

    /// Checks one upload's values and adds them by the kernel's exact rule (see `kernel.rs`).
    pub(super) fn add_exactly(
        &mut self,
        layout: &Layout,
        located: &[Located],
        data: &[&[u8]],
        weight: f64,
    ) -> Result<(), Rejection> {
        let mut bounds = std::mem::take(&mut self.bounds);
        let sums = self.sums_mut();
        let mut views = slot_views(sums);
        let outcome = accumulate(layout, located, data, weight, &mut views, &mut bounds);
        self.bounds = bounds;
        outcome?;
        self.total_weight += weight;
        Ok(())
    }

    /// [`Tally::add_exactly`]'s checks without the sums: `Ok(false)`, nothing changed, when only
    /// the sums can tell whether the upload overflows them.
    pub(super) fn check(
        &mut self,
        layout: &Layout,
        located: &[Located],
        data: &[&[u8]],
        weight: f64,
    ) -> Result<bool, Rejection> {
        let fits = check_values(layout, located, data, weight, &mut self.bounds)?;
        if fits {
            self.total_weight += weight;
        }
        Ok(fits)
    }

    /// The overflow rule for an upload checked elsewhere (a cluster's task), from each tensor's
    /// largest magnitude: `true` (bounds and total raised) when no sum can overflow; `false`,
    /// nothing changed, when only the sums could tell.
    pub(super) fn admit_largest(&mut self, weight: f64, largest: &[f64]) -> bool {
        if self.sums.is_some() || largest.len() != self.bounds.len() {
            return false;
        }
        let grown: Vec<f64> = self.bounds.iter().zip(largest).map(|(b, l)| b + weight * l).collect();
        if !grown.iter().all(|g| g.is_finite()) {
            return false;
        }
        self.bounds = grown;
        self.total_weight += weight;
        true
    }

    /// The sums, per slot (the means are the sums divided by the total weight: divided where they
    /// are rounded to their dtype, in the same pass).
    pub(super) fn into_sums(self) -> Result<Vec<Vec<f64>>, Error> {
        self.sums.ok_or_else(|| Error::Internal { detail: "a FedAvg round without sums".into() })
    }
}
