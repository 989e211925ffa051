//! Writes a run's outputs all or none: every output goes to a temporary file in the output
//! directory first, and only when all are written are they renamed over their final names
//! (a rename within one directory replaces the file at once). On a failure the temporaries are
//! removed and existing files are left as they were.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use kiln::{Array, Error};

/// Writes `DIR/<name>.npy` for each output; returns the paths written.
pub fn write_outputs(dir: &Path, outputs: &[(String, Array)]) -> kiln::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let finals: Vec<PathBuf> = outputs.iter().map(|(name, _)| dir.join(format!("{name}.npy"))).collect();
    // A name taken by a directory (or any non-regular file) would fail at rename: refuse first.
    for path in &finals {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.is_dir() || !(meta.is_file() || meta.file_type().is_symlink()) {
                return Err(Error::invalid(
                    "run",
                    format!("{} exists and is not a regular file; nothing was written", path.display()),
                ));
            }
        }
    }
    let mut temps: Vec<PathBuf> = Vec::with_capacity(outputs.len());
    for (name, array) in outputs {
        match write_temporary(dir, name, array) {
            Ok(temp) => temps.push(temp),
            Err(e) => {
                remove_all(&temps);
                return Err(e);
            }
        }
    }
    for (k, (temp, path)) in temps.iter().zip(&finals).enumerate() {
        if let Err(e) = std::fs::rename(temp, path) {
            remove_all(&temps[k..]);
            let done: Vec<String> = finals[..k].iter().map(|p| p.display().to_string()).collect();
            let msg = if done.is_empty() {
                "nothing was written".to_string()
            } else {
                format!("already replaced: {}", done.join(", "))
            };
            return Err(Error::invalid(
                "run",
                format!("renaming {} to {}: {e} ({msg})", temp.display(), path.display()),
            ));
        }
    }
    Ok(finals)
}

/// Writes `array` to a new hidden file beside `<name>.npy`.
fn write_temporary(dir: &Path, name: &str, array: &Array) -> kiln::Result<PathBuf> {
    let bytes = array.to_npy_bytes()?;
    for attempt in 0..100u32 {
        let temp = dir.join(format!(".{name}.npy.{}-{attempt}.tmp", std::process::id()));
        let mut file = match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&temp, e)),
        };
        if let Err(e) = file.write_all(&bytes).and_then(|()| file.sync_all()) {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::io(&temp, e));
        }
        return Ok(temp);
    }
    Err(Error::invalid("run", format!("no free temporary name for {name}.npy in {}", dir.display())))
}

fn remove_all(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}
