//! `kiln cache {list,size,clear}`: the on-disk kernel cache under `kiln::config::cache_dir()`.
//! An entry is one compiled kernel: a CPU library directory (`cpu/<key>/`), a precompiled CPU
//! prelude (`cpu-pch/<key>/`), a CPU scheduler object (`cpu-scheduler/<key>/`), a CUDA cubin
//! with its manifest (`cuda/<key>.cubin*`) or a process's precompiled CUDA prelude
//! (`cuda-pch/<pid>-<n>.pch`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::Subcommand;

use crate::out::outln;

#[derive(Subcommand)]
pub enum CacheCommand {
    /// List the entries: kind, size, age (oldest first), key.
    List,
    /// Print the cache's location and total size.
    Size,
    /// Remove entries: all of them, or only those older than --older-than, or the oldest until
    /// the cache fits in --max-size.
    Clear {
        /// Remove only entries built more than this many days ago.
        #[arg(long, value_name = "DAYS")]
        older_than: Option<f64>,
        /// Remove the oldest entries until the cache holds at most this much (e.g. 200M, 1G,
        /// 500K or bytes).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
    },
}

/// One cache entry: the files that make it up.
#[derive(Debug)]
struct Entry {
    kind: &'static str,
    key: String,
    files: Vec<PathBuf>,
    bytes: u64,
    built: SystemTime,
}

pub fn cache(command: CacheCommand) -> kiln::Result<()> {
    let root = kiln::config::cache_dir();
    let entries = entries(&root)?;
    match command {
        CacheCommand::List => {
            outln!("{} ({} entries, {})", root.display(), entries.len(), human(total(&entries)));
            let now = SystemTime::now();
            for e in &entries {
                outln!("{:<8} {:>10} {:>10}  {}", e.kind, human(e.bytes), age(now, e.built), e.key);
            }
        }
        CacheCommand::Size => outln!("{} in {} entries at {}", human(total(&entries)), entries.len(), root.display()),
        CacheCommand::Clear { older_than, max_size } => {
            let doomed = doomed(&entries, older_than, max_size, SystemTime::now())?;
            let freed: u64 = doomed.iter().map(|e| e.bytes).sum();
            for e in &doomed {
                for f in &e.files {
                    remove(f)?;
                }
            }
            outln!(
                "removed {} entries ({}); {} left in {}",
                doomed.len(),
                human(freed),
                human(total(&entries) - freed),
                root.display()
            );
        }
    }
    Ok(())
}

/// The entries `clear` removes, oldest first.
fn doomed(
    entries: &[Entry],
    older_than: Option<f64>,
    max_size: Option<u64>,
    now: SystemTime,
) -> kiln::Result<Vec<&Entry>> {
    if let Some(days) = older_than {
        if !(days.is_finite() && days >= 0.0) {
            return Err(kiln::Error::invalid(
                "cache clear",
                format!("--older-than {days}: give a number of days >= 0"),
            ));
        }
    }
    let mut left = total(entries);
    let mut out = Vec::new();
    for e in entries {
        let old = older_than.map(|days| now.duration_since(e.built).unwrap_or_default().as_secs_f64() > days * 86400.0);
        let over = max_size.map(|cap| left > cap);
        let remove = match (old, over) {
            (None, None) => true,
            (old, over) => old.unwrap_or(false) || over.unwrap_or(false),
        };
        if remove {
            left -= e.bytes;
            out.push(e);
        }
    }
    Ok(out)
}

fn remove(path: &Path) -> kiln::Result<()> {
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let r = if is_dir { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(kiln::Error::io(path, e)),
        _ => Ok(()),
    }
}

fn total(entries: &[Entry]) -> u64 {
    entries.iter().map(|e| e.bytes).sum()
}

/// Every entry under `root`, oldest first; a missing cache has none.
fn entries(root: &Path) -> kiln::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (dir, kind) in
        [("cpu", "cpu"), ("cpu-pch", "cpu-pch"), ("cpu-scheduler", "cpu-sched"), ("cuda-pch", "cuda-pch")]
    {
        for path in children(&root.join(dir))? {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() || dir == "cuda-pch") {
                let (bytes, built) = measure(&path);
                out.push(Entry { kind, key: file_name(&path), files: vec![path], bytes, built });
            }
        }
    }
    // A cubin and its manifest (and a writer's leftovers) share the key before the first dot.
    let mut cubins: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for path in children(&root.join("cuda"))? {
        let name = file_name(&path);
        let key = name.split('.').next().unwrap_or(&name).to_string();
        cubins.entry(key).or_default().push(path);
    }
    for (key, files) in cubins {
        let (mut bytes, mut built) = (0, SystemTime::UNIX_EPOCH);
        for f in &files {
            let (b, t) = measure(f);
            bytes += b;
            built = built.max(t);
        }
        out.push(Entry { kind: "cuda", key, files, bytes, built });
    }
    out.sort_by_key(|e| e.built);
    Ok(out)
}

fn children(dir: &Path) -> kiln::Result<Vec<PathBuf>> {
    match std::fs::read_dir(dir) {
        Ok(rd) => Ok(rd.filter_map(|e| e.ok().map(|e| e.path())).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(kiln::Error::io(dir, e)),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Total bytes and newest modification time of a file or a directory's files.
fn measure(path: &Path) -> (u64, SystemTime) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return (0, SystemTime::UNIX_EPOCH);
    };
    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    if !meta.is_dir() {
        return (meta.len(), modified);
    }
    let mut acc = (0, modified);
    for child in children(path).unwrap_or_default() {
        let (b, t) = measure(&child);
        acc = (acc.0 + b, acc.1.max(t));
    }
    acc
}

/// `200M`, `1.5G`, `500K`, `4096`: a size in bytes (powers of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&t[..i], t[i..].to_ascii_uppercase()),
        None => (t, String::new()),
    };
    let scale: u64 = match unit.trim_end_matches(['B', 'I']) {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("{text:?}: unknown unit (use K, M, G or T)")),
    };
    let n: f64 = number.trim().parse().map_err(|_| format!("{text:?} is not a size like 200M"))?;
    if !(n.is_finite() && n >= 0.0) {
        return Err(format!("{text:?} is not a size like 200M"));
    }
    Ok((n * scale as f64) as u64)
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

fn age(now: SystemTime, then: SystemTime) -> String {
    let s = now.duration_since(then).unwrap_or(Duration::ZERO).as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("200M"), Ok(200 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("512kib"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-1M").is_err());
    }
}
