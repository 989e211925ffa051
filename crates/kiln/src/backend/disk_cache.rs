//! Entries of the on-disk kernel caches (CPU libraries, CUDA cubins) are checked before use. An
//! entry is a payload file plus a manifest written after it, both renamed into place from
//! names private to the writer; the manifest holds the entry's full cache key, the payload's
//! length and its SHA-256. A reader takes the payload only when its manifest names the key it
//! asked for and the bytes hash to the recorded value, so a truncated or corrupted file, another
//! key's payload or a payload without a manifest is never used: the entry is removed and the
//! caller builds it again.

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

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = private_name(dir, &stem, "tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Stores `payload` as the entry of `key` at `path`: the payload first, then its manifest, each
/// renamed into place, so a crash in between leaves an entry without a manifest (rebuilt).
pub fn store(path: &Path, key: &str, payload: &[u8]) -> std::io::Result<()> {
    write_atomically(path, payload)?;
    write_atomically(&manifest_path(path), manifest_text(key, payload).as_bytes())
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
}
