//! What changed between two checkpoints, tensor by tensor.
//!
//! Tensors are matched by section (parameters; optimizer state) and key (a parameter's name; for
//! optimizer state `group/parameter/momentum`). Equal bytes are "same"; otherwise, for tensors of
//! the same type and shape, the largest absolute difference and the relative L2 distance
//! `‖b − a‖₂ / ‖a‖₂` (infinite when `a` is all zeros and `b` is not) over the elements.

use ortckpt_core::DataType;

use crate::numbers;

/// What a tensor holds, for comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Payload<'a> {
    /// Little-endian element bytes.
    Bytes(&'a [u8]),
    /// A string tensor's values.
    Strings(&'a [String]),
    /// No values (a nominal checkpoint).
    Nominal,
}

/// One tensor of a checkpoint being compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry<'a> {
    /// `parameter` or `optimizer`.
    pub section: &'static str,
    /// The name it is matched by.
    pub key: String,
    /// Its element type.
    pub data_type: DataType,
    /// Its shape.
    pub dims: &'a [i64],
    /// Its values.
    pub payload: Payload<'a>,
}

/// How one tensor differs.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// `parameter` or `optimizer`.
    pub section: &'static str,
    /// The matched name.
    pub key: String,
    /// `same`, `changed`, `added` (only in the second), `removed` (only in the first), `dtype`
    /// or `shape` (types or shapes differ: values not compared).
    pub status: &'static str,
    /// Elements whose values differ (NaN equals NaN), when compared.
    pub changed_elements: usize,
    /// The largest `|b − a|` (NaN when not numeric or not compared).
    pub max_abs_diff: f64,
    /// `‖b − a‖₂ / ‖a‖₂` (NaN when not numeric or not compared).
    pub rel_l2: f64,
}

/// Compares every tensor of `a` with its match in `b`, in `a`'s order, then `b`'s additions.
pub fn diff(a: &[Entry<'_>], b: &[Entry<'_>]) -> Vec<Change> {
    let find = |list: &[Entry<'_>], e: &Entry<'_>| {
        list.iter().position(|x| x.section == e.section && x.key == e.key)
    };
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    for ea in a {
        let change = match find(b, ea).and_then(|i| b.get(i)) {
            Some(eb) => compare(ea, eb),
            None => not_compared(ea, "removed"),
        };
        out.push(change);
    }
    for eb in b {
        if find(a, eb).is_none() {
            out.push(not_compared(eb, "added"));
        }
    }
    out
}

fn not_compared(e: &Entry<'_>, status: &'static str) -> Change {
    Change {
        section: e.section,
        key: e.key.clone(),
        status,
        changed_elements: 0,
        max_abs_diff: f64::NAN,
        rel_l2: f64::NAN,
    }
}

fn compare(a: &Entry<'_>, b: &Entry<'_>) -> Change {
    if a.data_type != b.data_type {
        return not_compared(a, "dtype");
    }
    if a.dims != b.dims {
        return not_compared(a, "shape");
    }
    let mut change = not_compared(a, "same");
    match (a.payload, b.payload) {
        (Payload::Bytes(x), Payload::Bytes(y)) if x == y => {
            if numbers::is_real(a.data_type) {
                (change.max_abs_diff, change.rel_l2) = (0.0, 0.0);
            }
        }
        (Payload::Bytes(x), Payload::Bytes(y)) if numbers::is_real(a.data_type) => {
            let (mut changed, mut max_abs, mut diff2, mut norm2) = (0, 0.0f64, 0.0, 0.0);
            let pieces = numbers::chunks(a.data_type, x).zip(numbers::chunks(a.data_type, y));
            let decoded =
                pieces.map(|(p, q)| (numbers::to_f64(a.data_type, p), numbers::to_f64(a.data_type, q)));
            for (u, v) in decoded.flat_map(|(xs, ys)| xs.into_iter().zip(ys)) {
                let same = u == v || (u.is_nan() && v.is_nan());
                if !same {
                    changed += 1;
                    let d = (v - u).abs();
                    max_abs = if d.is_nan() { f64::NAN } else { max_abs.max(d) };
                    diff2 += d * d;
                }
                norm2 += u * u;
            }
            change.changed_elements = changed;
            change.max_abs_diff = max_abs;
            change.rel_l2 = if diff2 == 0.0 { 0.0 } else { (diff2 / norm2).sqrt() };
            change.status = if changed == 0 { "same" } else { "changed" };
        }
        (Payload::Bytes(_), Payload::Bytes(_)) => change.status = "changed", // complex, bytes differ
        (Payload::Strings(x), Payload::Strings(y)) => {
            change.changed_elements = x.iter().zip(y).filter(|(s, t)| s != t).count();
            change.status = if change.changed_elements == 0 { "same" } else { "changed" };
        }
        (Payload::Nominal, Payload::Nominal) => {}
        _ => change.status = "changed", // one side nominal
    }
    change
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(key: &str, dims: &'a [i64], bytes: &'a [u8]) -> Entry<'a> {
        let payload = Payload::Bytes(bytes);
        Entry { section: "parameter", key: key.into(), data_type: DataType::Float, dims, payload }
    }

    #[test]
    fn names_changed_added_removed_and_measures() {
        let one: Vec<u8> = [3.0f32, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let two: Vec<u8> = [3.0f32, 5.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let a = [entry("w", &[2], &one), entry("b", &[2], &one), entry("gone", &[2], &one)];
        let b = [entry("w", &[2], &two), entry("b", &[2], &one), entry("new", &[2], &one)];
        let d = diff(&a, &b);
        let status: Vec<_> = d.iter().map(|c| (c.key.as_str(), c.status)).collect();
        assert_eq!(status, [("w", "changed"), ("b", "same"), ("gone", "removed"), ("new", "added")]);
        assert_eq!((d[0].changed_elements, d[0].max_abs_diff), (1, 1.0));
        assert!((d[0].rel_l2 - 0.2).abs() < 1e-15); // |(0,1)| / |(3,4)|
        let c = diff(&[entry("w", &[2], &one)], &[entry("w", &[1, 2], &one)]);
        assert_eq!(c[0].status, "shape");
    }
}
