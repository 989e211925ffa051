//! Large host buffers of the CPU backend's outputs, kept for the next output of the same size
//! after their arrays are dropped. A fresh buffer of tens of MiB costs the kernel's pass over it
//! again in page faults and the system's zero fill; a kept one has its pages already. Kept are
//! at most `MAX_KEPT` buffers and `MAX_KEPT_BYTES` in all (the oldest go first), only buffers of
//! `KEEP_FROM` bytes or more, and only those made for outputs ([`super::HostBuffer::placed_for_output`]),
//! whose next owner writes every data byte and gets zeroed aprons (`take`'s caller zeroes them).

use std::sync::Mutex;

/// The smallest allocation kept, in bytes (its aprons included).
pub const KEEP_FROM: usize = 8 << 20;
/// The most buffers kept.
const MAX_KEPT: usize = 4;
/// The most bytes kept in all.
const MAX_KEPT_BYTES: usize = 256 << 20;

/// Allocations kept, oldest first.
struct Kept {
    buffers: Vec<Vec<u128>>,
}

impl Kept {
    /// Keeps `words` (of `KEEP_FROM` bytes or more), then lets the oldest go until at most
    /// `max_kept` buffers of at most `max_bytes` in all remain.
    fn keep(&mut self, words: Vec<u128>, max_kept: usize, max_bytes: usize) {
        if bytes(&words) < KEEP_FROM || bytes(&words) > max_bytes {
            return;
        }
        self.buffers.push(words);
        let mut total: usize = self.buffers.iter().map(|w| bytes(w)).sum();
        while self.buffers.len() > max_kept || total > max_bytes {
            total -= bytes(&self.buffers.remove(0));
        }
    }

    /// The newest allocation of exactly `words` words.
    fn take(&mut self, words: usize) -> Option<Vec<u128>> {
        let at = self.buffers.iter().rposition(|w| w.len() == words)?;
        Some(self.buffers.remove(at))
    }
}

static KEPT: Mutex<Kept> = Mutex::new(Kept { buffers: Vec::new() });

fn bytes(words: &[u128]) -> usize {
    words.len() * 16
}

/// Keeps `words` for a later output of its size, or lets it go (too small, too large, or the
/// lock poisoned).
pub fn keep(words: Vec<u128>) {
    if bytes(&words) < KEEP_FROM {
        return;
    }
    if let Ok(mut kept) = KEPT.lock() {
        kept.keep(words, MAX_KEPT, MAX_KEPT_BYTES);
    }
}

/// A kept allocation of exactly `words` words (the newest); its contents are what its last
/// owner left.
pub fn take(words: usize) -> Option<Vec<u128>> {
    if words * 16 < KEEP_FROM {
        return None;
    }
    KEPT.lock().ok()?.take(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_kept_by_size_within_the_bounds() {
        let mut kept = Kept { buffers: Vec::new() };
        let words = KEEP_FROM / 16;
        kept.keep(vec![7u128; words - 1], 4, 1 << 40);
        assert!(kept.take(words - 1).is_none(), "smaller than KEEP_FROM: not kept");
        let a = vec![1u128; words];
        let address = a.as_ptr() as usize;
        kept.keep(a, 4, 1 << 40);
        assert!(kept.take(words + 1).is_none(), "only the exact size is handed out");
        assert_eq!(kept.take(words).map(|w| w.as_ptr() as usize), Some(address));
        assert!(kept.take(words).is_none(), "handed out once");
        for k in 0..6u128 {
            kept.keep(vec![k; words], 4, 1 << 40);
        }
        let mut firsts = Vec::new();
        while let Some(w) = kept.take(words) {
            firsts.push(w[0]);
        }
        assert_eq!(firsts, [5, 4, 3, 2], "at most four, the oldest let go first, the newest handed out first");
        for k in 0..3u128 {
            kept.keep(vec![k; words], 4, 2 * KEEP_FROM);
        }
        assert_eq!(kept.buffers.len(), 2, "at most the byte bound");
        kept.keep(vec![0u128; 3 * words], 4, 2 * KEEP_FROM);
        assert!(kept.take(3 * words).is_none(), "larger than the whole bound: not kept");
    }
}

/// Tests of reuse through `placed_for_output`, in the array module's terms.
#[cfg(test)]
mod placed_tests {
    use super::super::{HostBuffer, HOST_APRON_BYTES};

    #[test]
    fn a_reused_output_allocation_has_zero_aprons_again() {
        // A size no other test uses, so the allocation dropped is the one handed out again.
        let len = (9 << 20) + 48;
        let (mut first, base, total, data) = HostBuffer::placed_for_output(len, 1 << 16, 0).unwrap();
        assert!(data >= HOST_APRON_BYTES && data + len + HOST_APRON_BYTES <= total);
        first.bytes_mut().fill(0xAB);
        // A kernel that wrote outside its array: the aprons are dirty when it is dropped.
        if let super::super::HostRepr::Owned { words, .. } = &mut first.repr {
            words.iter_mut().for_each(|w| *w = u128::MAX);
        }
        drop(first);
        let (second, again, total2, data2) = HostBuffer::placed_for_output(len, 1 << 16, 0).unwrap();
        assert_eq!((again, total2, data2), (base, total, data), "the same allocation, placed the same");
        if let super::super::HostRepr::Owned { words, start, .. } = &second.repr {
            let end = start + len.div_ceil(16);
            assert!(words[..*start].iter().all(|&w| w == 0), "leading apron zeroed");
            assert!(words[end..].iter().all(|&w| w == 0), "trailing apron zeroed");
        }
        assert_eq!(second.len(), len);
    }
}
