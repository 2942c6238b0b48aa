//! Work spread over the machine's cores: one worker pool for the process (rayon's, with the
//! file layer; the browser build, without threads, runs the shares in turn), used by the
//! aggregation kernels and by the file layer's reads.

/// Below this many bytes the work stays on the calling thread (starting threads costs more).
const PARALLEL_MIN: usize = 4 << 20;

/// The worker threads to use: the machine's cores, at most 8 (asked once: the standard library
/// reads the cgroup files on every call).
pub(crate) fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()).min(8))
}

/// The process's worker pool, built on first use; `None` while it cannot be built (starting
/// threads needs memory and address space for their stacks). rayon's global pool would be built
/// once for good: a first use under memory pressure would then fail every later parallel call
/// of the process, so a pool of our own is built, and tried again after a failure.
#[cfg(feature = "fs")]
fn pool() -> Option<std::sync::Arc<rayon::ThreadPool>> {
    static POOL: std::sync::Mutex<Option<std::sync::Arc<rayon::ThreadPool>>> = std::sync::Mutex::new(None);
    let mut held = POOL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if held.is_none() {
        let built = rayon::ThreadPoolBuilder::new()
            .num_threads(threads())
            .thread_name(|i| format!("ortckpt-{i}"))
            .build();
        *held = built.ok().map(std::sync::Arc::new);
    }
    held.clone()
}

/// Runs `work` on every item, in up to `threads()` contiguous shares run on the process's worker
/// pool (rayon's; the browser build has no threads and runs them in turn); results in order.
pub(crate) fn in_parallel<T: Send, R: Send>(
    items: Vec<T>,
    bytes: usize,
    work: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let n = if bytes < PARALLEL_MIN { 1 } else { threads().min(items.len()).max(1) };
    if n == 1 {
        return items.into_iter().map(&work).collect();
    }
    let share = items.len().div_ceil(n);
    let mut groups: Vec<Vec<T>> = Vec::with_capacity(n);
    let mut items = items.into_iter();
    loop {
        let group: Vec<T> = items.by_ref().take(share).collect();
        if group.is_empty() {
            break;
        }
        groups.push(group);
    }
    let work = &work;
    let run = move |group: Vec<T>| group.into_iter().map(work).collect::<Vec<R>>();
    #[cfg(feature = "fs")]
    let done: Vec<Vec<R>> = match pool() {
        Some(pool) => pool.install(|| {
            use rayon::iter::{IntoParallelIterator, ParallelIterator};
            groups.into_par_iter().map(run).collect()
        }),
        // no worker threads could be started (memory or address space is short): in turn, here
        None => groups.into_iter().map(run).collect(),
    };
    #[cfg(not(feature = "fs"))]
    let done: Vec<Vec<R>> = groups.into_iter().map(run).collect();
    done.into_iter().flatten().collect()
}
