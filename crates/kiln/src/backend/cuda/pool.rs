//! Device blocks: where each buffer lies in the memory kiln takes from the driver, and a
//! host-side cache of freed blocks, so the allocations of repeated calls cost a table lookup
//! instead of a driver call. Reusing a block at once is safe because the backend has one
//! stream: work that still reads a freed block was queued before any new use of it.
//!
//! Every block lies at least [`APRON_BYTES`] inside its driver allocation on both sides, so a
//! kernel that loads a value just outside a buffer and then discards it (`v = x[i]; v = ok ? v
//! : 0`, the MLX docs' `grid_sample`) reads unspecified bytes instead of faulting, as on Apple
//! GPUs. Large blocks get an allocation of their own with an apron before and after; small
//! power-of-two classes are carved side by side from one allocation (a slab) with the two
//! aprons at its ends, so the aprons cost per slab, not per buffer. Memory kiln does not
//! allocate (an array wrapped from another framework) has no apron. Writes into an apron are not
//! caught, as writes into a neighbouring block of the driver's pool are not.

use std::sync::{Arc, Mutex};

use cudarc::driver::CudaSlice;
use rustc_hash::FxHashMap;

/// Readable bytes guaranteed before the start and after the end of every buffer kiln
/// allocates: one image row plus one pixel for rows of up to 1 MiB less a pixel (the docs'
/// benchmark `grid_sample`, 1024 x 64 float32, reads 256 KiB + 256 bytes outside).
pub const APRON_BYTES: usize = 1 << 20;

/// Classes up to this size are carved from slabs.
const MAX_SLAB_CLASS: usize = 1 << 20;
/// A slab holds at least this many bytes of blocks (and at least 8 blocks) ...
const SLAB_BYTES: usize = 4 << 20;
/// ... and at most this many blocks, which bounds the host's work to carve one.
const MAX_SLAB_BLOCKS: usize = 1024;

/// Blocks up to this size are cached; larger ones go back to the driver's stream-ordered pool.
const MAX_CACHED_BLOCK: usize = 64 << 20;
/// The most bytes held in the cache (a block of its own counts with its aprons).
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

/// How the blocks of one class are placed in one driver allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Placement {
    /// Bytes to allocate from the driver.
    pub bytes: usize,
    /// Offset of the first block's byte 0 in the allocation.
    pub first: usize,
    /// Blocks side by side from `first`, `class` bytes apart.
    pub count: usize,
}

/// The placement of fresh blocks of `class` bytes (a value of [`size_class`]); `None` when
/// the total does not fit in an address.
pub(super) fn placement(class: usize) -> Option<Placement> {
    let count = if class <= MAX_SLAB_CLASS { (SLAB_BYTES / class).clamp(8, MAX_SLAB_BLOCKS) } else { 1 };
    let bytes = class.checked_mul(count)?.checked_add(2 * APRON_BYTES)?;
    Some(Placement { bytes, first: APRON_BYTES, count })
}

/// One block of device memory: `class` bytes at `address`, inside a driver allocation shared
/// with the other blocks of its slab (freed, stream-ordered, when the last of them is).
pub(super) struct Block {
    /// Held so that the allocation lives as long as any block carved from it.
    _allocation: Arc<CudaSlice<u8>>,
    address: u64,
    class: usize,
    /// Device memory the block holds on its own: its allocation when it has one to itself,
    /// else its class.
    footprint: usize,
}

impl Block {
    /// The blocks of one fresh driver allocation `memory` made for `class` at `placement`.
    pub fn carve(memory: CudaSlice<u8>, base: u64, class: usize, placement: Placement) -> Vec<Block> {
        let memory = Arc::new(memory);
        let footprint = if placement.count == 1 { placement.bytes } else { class };
        (0..placement.count)
            .map(|i| Block {
                _allocation: memory.clone(),
                address: base + (placement.first + i * class) as u64,
                class,
                footprint,
            })
            .collect()
    }

    /// The device address of byte 0.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Whether `[address - APRON_BYTES, address + class + APRON_BYTES)` lies in the block's
    /// driver allocation at `base` (what [`placement`] guarantees).
    #[cfg(test)]
    fn aprons_within(address: u64, class: usize, base: u64, bytes: usize) -> bool {
        address >= base + APRON_BYTES as u64 && address + (class + APRON_BYTES) as u64 <= base + bytes as u64
    }
}

/// Free blocks by size class, and the bytes they hold.
type FreeBlocks = (FxHashMap<usize, Vec<Block>>, usize);

#[derive(Default)]
pub(super) struct BlockPool {
    free: Mutex<FreeBlocks>,
}

impl BlockPool {
    /// A cached block of exactly `class` bytes, if one is free.
    pub fn take(&self, class: usize) -> Option<Block> {
        let mut guard = self.free.lock().ok()?;
        let (map, held) = &mut *guard;
        let block = map.get_mut(&class)?.pop()?;
        *held -= block.footprint;
        Some(block)
    }

    /// Keeps `block` for reuse, or lets it go (back to the driver once no block of its
    /// allocation is left) when too large or the cache is full.
    pub fn give(&self, block: Block) {
        let rejected = match self.free.lock() {
            Ok(mut guard) => keep(&mut guard, block),
            Err(_) => Some(block),
        };
        // Freed, if it is, after the lock is released.
        drop(rejected);
    }

    /// [`Self::give`] for many blocks (a fresh slab's spares), under one lock.
    pub fn give_all(&self, blocks: Vec<Block>) {
        let mut rejected = Vec::new();
        if let Ok(mut guard) = self.free.lock() {
            rejected.extend(blocks.into_iter().filter_map(|block| keep(&mut guard, block)));
        }
        drop(rejected);
    }
}

/// Adds `block` to `free` unless it is too large or the cache is full; returns it then.
fn keep((map, held): &mut FreeBlocks, block: Block) -> Option<Block> {
    if block.class > MAX_CACHED_BLOCK || *held + block.footprint > MAX_CACHED_BYTES {
        return Some(block);
    }
    *held += block.footprint;
    map.entry(block.class).or_default().push(block);
    None
}

#[cfg(test)]
mod tests {
    use super::{placement, size_class, Block, APRON_BYTES};

    #[test]
    fn size_classes_round_up() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(300), 512);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 2 << 20);
    }

    #[test]
    fn every_block_has_an_apron_inside_its_allocation_on_both_sides() {
        let base = 0x7f00_0000_0000u64;
        let lens = [0, 1, 255, 256, 4000, 4096, 100_000, 1 << 20, (1 << 20) + 1, 5 << 20, 1 << 31];
        for len in lens {
            let class = size_class(len);
            let p = placement(class).unwrap();
            assert!(p.count >= 1 && p.count <= 1024, "len {len}: {p:?}");
            for i in 0..p.count {
                let address = base + (p.first + i * class) as u64;
                assert!(Block::aprons_within(address, class, base, p.bytes), "len {len}, block {i}: {p:?}");
                assert_eq!(address % 256, 0, "blocks keep 256-byte alignment");
            }
            // The placement wastes nothing but the two aprons.
            assert_eq!(p.bytes, p.count * class + 2 * APRON_BYTES);
        }
    }

    #[test]
    fn small_classes_share_their_aprons_and_large_ones_stand_alone() {
        assert_eq!(placement(256).unwrap().count, 1024);
        assert_eq!(placement(4096).unwrap().count, 1024);
        assert_eq!(placement(512 << 10).unwrap().count, 8);
        assert_eq!(placement(1 << 20).unwrap().count, 8);
        assert_eq!(placement(2 << 20).unwrap().count, 1);
        assert_eq!(placement(usize::MAX & !((1 << 20) - 1)), None);
    }
}
