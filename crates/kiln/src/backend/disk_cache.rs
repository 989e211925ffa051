//! Entries of the on-disk kernel caches (CPU libraries, CUDA cubins) are checked before use. An
//! entry is a payload file plus a manifest written after it, both renamed into place from
//! names private to the writer; the manifest holds the entry's full cache key, the payload's
//! length and its SHA-256. A reader takes the payload only when its manifest names the key it
//! asked for and the bytes hash to the recorded value, so a truncated or corrupted file, another
//! key's payload or a payload without a manifest is never used: the entry is removed and the
//! caller builds it again. A write that fails (a full disk, say) removes its private file, and a
//! store that fails leaves no entry. Which directory the entries go in is `cache_root`'s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

const MAGIC: &str = "kiln cache entry 1";

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The manifest beside `payload` (`kernel.so` -> `kernel.so.manifest`).
pub fn manifest_path(payload: &Path) -> PathBuf {
    let mut name = payload.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".manifest");
    payload.with_file_name(name)
}

fn manifest_text(key: &str, payload: &[u8]) -> String {
    format!("{MAGIC}\nkey {key}\nbytes {}\nsha256 {}\n", payload.len(), hex_sha256(payload))
}

/// A name in `dir` no other writer uses (process id and a counter).
pub fn private_name(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    dir.join(format!("{stem}.{}.{}.{ext}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)))
}

/// A file of one writer's own (a [`private_name`]), removed when dropped unless it was renamed
/// into place: no failure on the way (a write, the compiler, a rename) leaves it behind.
pub struct Scratch {
    path: PathBuf,
    kept: bool,
}

impl Scratch {
    /// A new private name in `dir`; nothing is created yet.
    pub fn new(dir: &Path, stem: &str, ext: &str) -> Self {
        Scratch { path: private_name(dir, stem, ext), kept: false }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file to `to`; on failure it is removed.
    pub fn rename_to(mut self, to: &Path) -> std::io::Result<()> {
        std::fs::rename(&self.path, to)?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes `bytes` at `path` through a private name renamed into place, so a reader sees the
/// old file or the whole new one, and a failed write leaves neither a partial file nor the
/// private one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_with(path, bytes, &mut |tmp, bytes| std::fs::write(tmp, bytes))
}

/// A writer of a whole file (`std::fs::write`, or one that fails on purpose in tests).
type Writer<'a> = dyn FnMut(&Path, &[u8]) -> std::io::Result<()> + 'a;

fn write_atomically_with(path: &Path, bytes: &[u8], write: &mut Writer<'_>) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = Scratch::new(dir, &stem, "tmp");
    write(tmp.path(), bytes)?;
    tmp.rename_to(path)
}

/// Stores `payload` as the entry of `key` at `path`: the payload first, then its manifest, each
/// renamed into place, so a crash in between leaves an entry without a manifest (rebuilt). A
/// store that fails leaves no entry.
pub fn store(path: &Path, key: &str, payload: &[u8]) -> std::io::Result<()> {
    store_with(path, key, payload, &mut |tmp, bytes| std::fs::write(tmp, bytes))
}

fn store_with(path: &Path, key: &str, payload: &[u8], write: &mut Writer<'_>) -> std::io::Result<()> {
    write_atomically_with(path, payload, write)?;
    write_atomically_with(&manifest_path(path), manifest_text(key, payload).as_bytes(), write)
        .inspect_err(|_| remove(path))
}

/// The payload at `path` when its manifest vouches for it under `key`; otherwise `None`, and a
/// damaged entry (payload or manifest present but not matching) is removed.
pub fn load_verified(path: &Path, key: &str) -> Option<Vec<u8>> {
    let manifest = manifest_path(path);
    let payload = std::fs::read(path).ok();
    let recorded = std::fs::read_to_string(&manifest).ok();
    let (payload, recorded) = match (payload, recorded) {
        (Some(p), Some(m)) => (p, m),
        (None, None) => return None,
        _ => {
            remove(path);
            return None;
        }
    };
    if recorded != manifest_text(key, &payload) {
        remove(path);
        return None;
    }
    Some(payload)
}

/// Removes the entry at `path` (payload and manifest); what cannot be removed is overwritten
/// by the next store.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(manifest_path(path));
    let _ = std::fs::remove_file(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-disk-cache-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn only_the_stored_bytes_under_their_own_key_are_returned() {
        let dir = scratch_dir("verify");
        let (a, b) = (dir.join("a.bin"), dir.join("b.bin"));
        let (bytes_a, bytes_b) = (b"payload of entry a".to_vec(), b"entry b".to_vec());
        store(&a, "key-a", &bytes_a).unwrap();
        store(&b, "key-b", &bytes_b).unwrap();
        assert_eq!(load_verified(&a, "key-a").as_deref(), Some(&bytes_a[..]));
        // Asked under another key.
        assert_eq!(load_verified(&a, "key-b"), None);
        assert!(!a.exists() && !manifest_path(&a).exists());
        // Truncated, overwritten, swapped, without a manifest.
        let damage: [&dyn Fn(); 4] = [
            &|| std::fs::write(&b, &bytes_b[..3]).unwrap(),
            &|| std::fs::write(&b, b"garbage").unwrap(),
            &|| std::fs::write(&b, &bytes_a).unwrap(),
            &|| std::fs::remove_file(manifest_path(&b)).unwrap(),
        ];
        for d in damage {
            store(&b, "key-b", &bytes_b).unwrap();
            d();
            assert_eq!(load_verified(&b, "key-b"), None);
            assert!(!b.exists(), "a damaged entry is removed");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    /// A writer that writes the first half of the bytes and then finds the disk full: the rest
    /// goes to `/dev/full` where there is one, else the error is made up.
    fn fills_the_disk_halfway(tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let (head, tail) = bytes.split_at(bytes.len() / 2);
        std::fs::write(tmp, head)?;
        match std::fs::OpenOptions::new().write(true).open("/dev/full") {
            Ok(mut full) => full.write_all(tail).and_then(|()| full.flush()),
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::StorageFull)),
        }
    }

    #[test]
    fn a_write_that_fills_the_disk_halfway_leaves_no_file_behind() {
        let dir = scratch_dir("full");
        let path = dir.join("prelude.h");
        let bytes = vec![b'x'; 64 * 1024];
        let err = write_atomically_with(&path, &bytes, &mut fills_the_disk_halfway).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(names_in(&dir), Vec::<String>::new());

        // The payload stored, the manifest's write failing: the payload goes too.
        let mut writes = 0;
        let mut second_fails = |tmp: &Path, bytes: &[u8]| {
            writes += 1;
            if writes == 1 {
                std::fs::write(tmp, bytes)
            } else {
                fills_the_disk_halfway(tmp, bytes)
            }
        };
        let err = store_with(&path, "key", &bytes, &mut second_fails).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(names_in(&dir), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rename_that_fails_leaves_no_temporary_file() {
        let dir = scratch_dir("rename");
        // A non-empty directory where the file should go: the rename fails.
        let path = dir.join("kernel.so");
        std::fs::create_dir_all(path.join("inside")).unwrap();
        assert!(store(&path, "key", b"library").is_err());
        assert_eq!(names_in(&dir), vec!["kernel.so".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_scratch_file_is_removed_unless_renamed_into_place() {
        let dir = scratch_dir("scratch");
        let dropped = Scratch::new(&dir, "kernel", "cpp");
        std::fs::write(dropped.path(), b"int x;").unwrap();
        drop(dropped);
        assert_eq!(names_in(&dir), Vec::<String>::new());
        let kept = Scratch::new(&dir, "kernel", "cpp");
        std::fs::write(kept.path(), b"int x;").unwrap();
        kept.rename_to(&dir.join("kernel.cpp")).unwrap();
        assert_eq!(names_in(&dir), vec!["kernel.cpp".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
