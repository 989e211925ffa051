//! Metal's limits on one launch, kept by every backend so that a kernel that runs here runs on
//! an Apple GPU too, and the one check of a launch's threadgroup.

use crate::error::{Error, Result};

/// Metal's limit on threads per threadgroup.
pub const MAX_THREADS_PER_THREADGROUP: u64 = 1024;
/// Metal's limit on buffer slots of one kernel.
pub const MAX_BUFFERS: usize = 31;
/// Metal's limit on threadgroup memory per threadgroup, in bytes (32 KiB).
pub const MAX_THREADGROUP_MEMORY: usize = 32 * 1024;
/// The most axes an input may have when its shape or strides are passed to a kernel.
pub const MAX_NDIM: usize = 10;

/// Checks the threadgroup a launch of `op` runs: no zero dimension and at most
/// [`MAX_THREADS_PER_THREADGROUP`] threads (MLX's words for both).
pub fn check_threadgroup(op: &str, threadgroup: [u32; 3]) -> Result<()> {
    if threadgroup.contains(&0) {
        return Err(Error::invalid(op, format!("threadgroup {threadgroup:?} has a zero dimension")));
    }
    let total: u64 = threadgroup.iter().map(|&t| u64::from(t)).product();
    if total > MAX_THREADS_PER_THREADGROUP {
        return Err(Error::invalid(
            op,
            format!(
                "thread group size ({total}) is greater than the maximum allowed threads per threadgroup \
                 ({MAX_THREADS_PER_THREADGROUP})"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threadgroups_are_checked_against_metal() {
        assert!(check_threadgroup("k", [1024, 1, 1]).is_ok());
        assert!(check_threadgroup("k", [32, 32, 1]).is_ok());
        for (tg, words) in [([0, 1, 1], "zero dimension"), ([4, 0, 2], "zero dimension"), ([33, 32, 1], "(1056)")] {
            let err = check_threadgroup("kernel k", tg).unwrap_err().to_string();
            assert!(err.contains("kernel k") && err.contains(words), "{tg:?}: {err}");
        }
    }
}
