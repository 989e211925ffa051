//! A host-side cache of freed device blocks, so the allocations of repeated small calls cost a
//! table lookup instead of a driver call. Reusing a block at once is safe because the backend
//! has one stream: work that still reads a freed block was queued before any new use of it.

use std::sync::Mutex;

use cudarc::driver::CudaSlice;
use rustc_hash::FxHashMap;

/// Blocks up to this size are cached; larger ones go back to the driver's stream-ordered pool.
const MAX_CACHED_BLOCK: usize = 64 << 20;
/// The most bytes held in the cache.
const MAX_CACHED_BYTES: usize = 1 << 30;

/// The size class of a request: powers of two up to 1 MiB (at least 256 bytes), then
/// multiples of 1 MiB.
pub(super) fn size_class(len: usize) -> usize {
    let len = len.max(1);
    if len <= 1 << 20 {
        len.next_power_of_two().max(256)
    } else {
        len.div_ceil(1 << 20) << 20
    }
}

/// Free blocks by size class, and the bytes they hold.
type FreeBlocks = (FxHashMap<usize, Vec<CudaSlice<u8>>>, usize);

#[derive(Default)]
pub(super) struct BlockPool {
    free: Mutex<FreeBlocks>,
}

impl BlockPool {
    /// A cached block of exactly `class` bytes, if one is free.
    pub fn take(&self, class: usize) -> Option<CudaSlice<u8>> {
        let mut guard = self.free.lock().ok()?;
        let (map, held) = &mut *guard;
        let block = map.get_mut(&class)?.pop()?;
        *held -= class;
        Some(block)
    }

    /// Keeps `block` for reuse, or lets it go back to the driver when too large or the cache
    /// is full.
    pub fn give(&self, block: CudaSlice<u8>) {
        let class = block.len();
        if class > MAX_CACHED_BLOCK {
            return;
        }
        if let Ok(mut guard) = self.free.lock() {
            let (map, held) = &mut *guard;
            if *held + class <= MAX_CACHED_BYTES {
                *held += class;
                map.entry(class).or_default().push(block);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_round_up() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(300), 512);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 2 << 20);
    }
}
