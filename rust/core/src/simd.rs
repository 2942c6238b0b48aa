//! One SIMD policy for every hot loop: the level is decided once per process (the CPU's features,
//! capped by the `ORTCKPT_SIMD` environment variable) and every loop with more than one version
//! asks [`simd_level`] which to run.
//!
//! The wheels are built for baseline x86-64 (SSE2), where the loops' integer max, float64
//! widening and min/max vectorize poorly or not at all; the same source compiled a second time
//! with AVX2 enabled ([`avx2_dispatch!`]) runs 2-4x fewer instructions, and the robust statistics'
//! counting loops have AVX-512 versions (`aggregate/select/avx512.rs`). Every version gives the
//! same results bit for bit (the tests compare them); `ORTCKPT_SIMD=plain` runs the baseline code
//! everywhere, `avx2` stops at AVX2 (docs/architecture.md). Other architectures run the baseline
//! code only.

use std::sync::atomic::{AtomicU8, Ordering};

/// The versions of the hot loops, in increasing order: a level runs the versions up to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// The baseline code (x86-64's SSE2, or what the target has), vectorized by the compiler.
    Plain = 1,
    /// The loops' copies compiled with AVX2.
    Avx2 = 2,
    /// AVX-512F loops where they exist, AVX2 elsewhere.
    Avx512 = 3,
}

/// The environment variable that caps the level (read once, when a loop first asks).
pub const SIMD_ENV: &str = "ORTCKPT_SIMD";

impl SimdLevel {
    /// Every level, lowest first.
    pub const ALL: [SimdLevel; 3] = [SimdLevel::Plain, SimdLevel::Avx2, SimdLevel::Avx512];

    /// The level's name, as [`SIMD_ENV`] takes it: `plain`, `avx2` or `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Plain => "plain",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// The level to run: what the CPU has (`detected`), capped by the override `requested` (the
    /// variable's value; unset or empty: no cap). An override never raises the level past what
    /// the CPU has (the faster loops would fault); a value that names no level runs the plain
    /// loops (an override means "less": the safe reading of a typo).
    fn chosen(detected: SimdLevel, requested: Option<&str>) -> SimdLevel {
        match requested.map(str::trim).filter(|r| !r.is_empty()) {
            None => detected,
            Some(name) => {
                let cap = SimdLevel::ALL.into_iter().find(|l| l.name().eq_ignore_ascii_case(name));
                cap.unwrap_or(SimdLevel::Plain).min(detected)
            }
        }
    }

    fn from_code(code: u8) -> Option<SimdLevel> {
        SimdLevel::ALL.into_iter().find(|l| *l as u8 == code)
    }
}

/// The level decided for this process (0 until a loop first asks).
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The level the hot loops run at: decided on the first call, the same for the rest of the
/// process (one relaxed load per call: as cheap as the standard library's own feature cache).
#[inline]
pub fn simd_level() -> SimdLevel {
    SimdLevel::from_code(LEVEL.load(Ordering::Relaxed)).unwrap_or_else(decide)
}

#[cold]
fn decide() -> SimdLevel {
    // Two threads deciding at once both find the same level: no lock needed.
    let level = SimdLevel::chosen(detected(), std::env::var(SIMD_ENV).ok().as_deref());
    LEVEL.store(level as u8, Ordering::Relaxed);
    level
}

/// What the CPU runs (AVX-512 only with AVX2: its level runs the AVX2 copies too).
fn detected() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            if std::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Plain
}

/// Defines `fn $name(...)` running `$body`, plus a copy of it compiled with AVX2 that `$name`
/// calls instead when [`simd_level`] is AVX2 or higher. The body must be safe code: the copy only
/// changes which instructions the compiler may use.
macro_rules! avx2_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident / $fast:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if $crate::simd::simd_level() >= $crate::simd::SimdLevel::Avx2 {
                // SAFETY: `$fast` only requires AVX2; the level is AVX2 or higher only when the
                // CPU reports AVX2 (`detected`: an override can only lower it).
                return unsafe { $fast($($arg),*) };
            }
            $body
        }

        $(#[$meta])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $fast($($arg: $ty),*) $(-> $ret)? $body
    };
}

pub(crate) use avx2_dispatch;

#[cfg(test)]
mod tests {
    use super::*;
    use SimdLevel::*;

    #[test]
    fn an_override_caps_the_level_and_never_raises_it() {
        for detected in SimdLevel::ALL {
            assert_eq!(SimdLevel::chosen(detected, None), detected);
            assert_eq!(SimdLevel::chosen(detected, Some("")), detected);
            assert_eq!(SimdLevel::chosen(detected, Some("plain")), Plain);
            assert_eq!(SimdLevel::chosen(detected, Some(" PLAIN ")), Plain);
            assert_eq!(SimdLevel::chosen(detected, Some("avx2")), detected.min(Avx2));
            assert_eq!(SimdLevel::chosen(detected, Some("avx512")), detected);
            // a value naming no level: the plain loops
            assert_eq!(SimdLevel::chosen(detected, Some("sse9")), Plain);
        }
    }

    #[test]
    fn the_level_is_decided_once_and_the_cpu_has_it() {
        let first = simd_level();
        assert!(first <= detected());
        assert_eq!(simd_level(), first);
        if std::env::var(SIMD_ENV).is_ok_and(|v| v.trim() == "plain") {
            assert_eq!(first, Plain);
        }
        for level in SimdLevel::ALL {
            assert_eq!(SimdLevel::from_code(level as u8), Some(level));
        }
        assert_eq!(SimdLevel::from_code(0), None);
    }
}
