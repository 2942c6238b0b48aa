//! Runtime dispatch to AVX2 for the aggregation's hot loops. The wheels are built for baseline
//! x86-64 (SSE2), where the loops' integer max, float64 widening and min/max vectorize poorly or
//! not at all; the same source compiled a second time with AVX2 enabled runs 2-4x fewer
//! instructions. Which one runs is decided per call by the CPU's reported features (the check
//! is one cached load). Other architectures compile the plain loop only.

/// Defines `fn $name(...)` running `$body`, plus a copy of it compiled with AVX2 that `$name`
/// calls instead when the CPU has AVX2. The body must be safe code: the copy only changes which
/// instructions the compiler may use.
macro_rules! avx2_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident / $fast:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: `$fast` only requires AVX2, which the CPU was just reported to have.
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
