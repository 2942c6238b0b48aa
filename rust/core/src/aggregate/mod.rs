//! Aggregation of device uploads (federated averaging) at memory speed: the structural check of
//! an upload's index against the reference's [`Layout`], the weight rule, and the kernel that
//! checks every value and adds `weight × value` into float64 sums (see `kernel`). Uploads are
//! read into private memory ([`read_file`]), never through a shared mapping.

mod block;
#[cfg(feature = "fs")] // the checks of a round's uploads
mod checks;
mod columns;
mod distances;
#[cfg(feature = "fs")] // a round reads upload files
mod engine;
#[cfg(feature = "fs")] // a round's results
mod float32s;
mod kernel;
mod rejection;
#[cfg(feature = "fs")] // reads upload files
mod round;
#[cfg(feature = "fs")] // reads upload files
mod rows;
mod select;
#[cfg(feature = "fs")] // reads upload files
mod stream;
mod structure;
#[cfg(feature = "fs")] // upload files; the rest works on bytes (the browser build too)
mod upload;
#[cfg(feature = "fs")] // reads upload files
mod verdict;

pub use block::Statistic;
pub use columns::{reduce_block, reduce_stored_block, NETWORK_UP_TO};
pub use distances::add_pairwise;
#[cfg(feature = "fs")]
pub use engine::{
    add_noise, check_trim, clip_scale, passes, plan_of, random_seed, segments, Aggregate,
    FileUpload as RoundFile, Held, Identity, MemberReport, Method, Options, Origin, Partial, Plan, Portable,
    Reduced, Round, Segment, Shared, Slot, Staleness, Stamp, Unfinished, Values, Verdict as RoundVerdict,
    MIN_CHUNK_BYTES,
};
#[cfg(feature = "fs")]
pub use float32s::Float32s;
pub use kernel::{accumulate, add_window, check_values, slot_bytes};
pub use rejection::{Rejection, RejectionKind};
#[cfg(feature = "fs")]
pub use round::{add_files, check_files, Screened};
#[cfg(feature = "fs")]
pub use rows::{read_rows, reduce_rows, reduce_slots, RowSource, MIN_CHUNK_LANES};
pub use structure::{
    check_structure, type_name, weight_of, weight_problem, ExpectedMomentum, ExpectedParam, Layout, Located,
    WeightRule, MAX_WEIGHT, MIN_WEIGHT,
};
#[cfg(feature = "fs")]
pub use upload::{
    index_upload, open_files, read_file, release_buffers, Buffer, FileUpload, HeldFiles, Refusal,
};
#[cfg(feature = "fs")]
pub use verdict::{FileItem, Verdict};
// the value decoder lives at the core's top level (`crate::values`: the browser viewer uses it
// too); these names stay where the binding finds them
pub use crate::values::{decode_into, f16_to_f64, f8_table, Lanes, F8};
