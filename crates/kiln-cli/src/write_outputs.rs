//! Writes a run's outputs all or none: every output goes to a temporary file in the output
//! directory first, and only when all are written are they renamed over their final names
//! (a rename within one directory replaces the file at once). On a failure the temporaries are
//! removed and existing files are left as they were.
//!
//! A writer killed before the renames leaves its temporaries (`.<name>.npy.<pid>-<attempt>.tmp`)
//! behind; the next write into the directory removes those that no writer will rename: where
//! `/proc` lists the running processes (Linux), those whose process is gone; elsewhere those
//! untouched for an hour (a write of outputs takes seconds). Nothing else is touched, and
//! never a file of a process that runs.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln::{Array, Error};

/// Writes `DIR/<name>.npy` for each output; returns the paths written.
pub fn write_outputs(dir: &Path, outputs: &[(String, Array)]) -> kiln::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    remove_stale_temporaries(dir);
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

/// How long a temporary output of a process kiln cannot see is kept (no `/proc`).
const UNTOUCHED_FOR: Duration = Duration::from_secs(3600);

/// The writer's process id in the name of a temporary output (`.<name>.npy.<pid>-<attempt>.tmp`);
/// `None` for any other name.
fn temporary_pid(file_name: &str) -> Option<u32> {
    let inner = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (name, tag) = inner.rsplit_once(".npy.")?;
    let (pid, attempt) = tag.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if name.is_empty() || !digits(pid) || !digits(attempt) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the temporary outputs in `dir` that no writer will rename (see the module's notes).
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let proc_lists = Path::new("/proc/self").exists();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(temporary_pid) else { continue };
        // Not followed: a link or a directory of that name is not a temporary output.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || pid == std::process::id() {
            continue;
        }
        let stale = if proc_lists {
            !Path::new("/proc").join(pid.to_string()).exists()
        } else {
            meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age > UNTOUCHED_FOR)
        };
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
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

#[cfg(test)]
mod tests {
    use super::temporary_pid;

    #[test]
    fn only_names_of_temporary_outputs_give_a_process() {
        assert_eq!(temporary_pid(".out.npy.4242-0.tmp"), Some(4242));
        assert_eq!(temporary_pid(".a.npy.b.npy.7-12.tmp"), Some(7));
        for other in [
            "out.npy.4242-0.tmp",
            ".out.npy.4242-0.tmp~",
            ".out.npy.4242.tmp",
            ".out.npy.-0.tmp",
            ".out.npy.4242-.tmp",
            ".out.npy.42x2-0.tmp",
            "..npy.4242-0.tmp",
            ".out.npz.4242-0.tmp",
            ".out.npy.4242-0-1.tmp",
        ] {
            assert_eq!(temporary_pid(other), None, "{other}");
        }
    }
}
