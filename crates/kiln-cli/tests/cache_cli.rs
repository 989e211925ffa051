//! `kiln cache {list,size,clear}` on a cache directory of the test's own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

fn kiln(cache: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).env("KILN_CACHE_DIR", cache).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cache-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `bytes` bytes at `path`, dated `days_ago`, and dates its directory the same.
fn file(path: &Path, bytes: usize, days_ago: f64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, vec![7u8; bytes]).unwrap();
    let when = SystemTime::now() - Duration::from_secs_f64(days_ago * 86400.0);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(when).unwrap();
    std::fs::File::open(path.parent().unwrap()).unwrap().set_modified(when).unwrap();
}

/// Four entries, one of each kind and age: 3000 + 2000 + 1100 + 500 bytes.
fn fill(cache: &Path) {
    file(&cache.join("cpu/aaa/kernel.so"), 3000, 3.0);
    file(&cache.join("cpu/bbb/kernel.so"), 2000, 2.0);
    file(&cache.join("cuda/ccc.cubin"), 1000, 1.0);
    file(&cache.join("cuda/ccc.cubin.manifest"), 100, 1.0);
    file(&cache.join("cpu-pch/ddd/prelude.h.gch"), 500, 0.0);
}

fn present(cache: &Path) -> Vec<&'static str> {
    [("aaa", "cpu/aaa"), ("bbb", "cpu/bbb"), ("ccc", "cuda/ccc.cubin"), ("ddd", "cpu-pch/ddd")]
        .into_iter()
        .filter(|(_, p)| cache.join(p).exists())
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn size_and_list_report_every_entry_with_its_kind() {
    let cache = scratch("list").join("cache");
    fill(&cache);
    let size = stdout(&kiln(&cache, &["cache", "size"]));
    assert!(size.contains("6.4 KiB in 4 entries"), "{size}");
    assert!(size.contains(&*cache.to_string_lossy()), "{size}");
    let list = stdout(&kiln(&cache, &["cache", "list"]));
    let rows: Vec<Vec<&str>> = list.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    let kinds: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], *r.last().unwrap())).collect();
    // Oldest first.
    assert_eq!(kinds, [("cpu", "aaa"), ("cpu", "bbb"), ("cuda", "ccc"), ("cpu-pch", "ddd")], "{list}");
    assert!(rows[0].contains(&"3d"), "{list}");
}

#[test]
fn clear_removes_by_age_by_size_cap_or_everything() {
    let cache = scratch("clear").join("cache");
    fill(&cache);
    // 6600 bytes over a 4000-byte cap: the oldest (3000) goes, 3600 stay.
    kiln(&cache, &["cache", "clear", "--max-size", "4000"]);
    assert_eq!(present(&cache), ["bbb", "ccc", "ddd"]);
    kiln(&cache, &["cache", "clear", "--older-than", "1.5"]);
    assert_eq!(present(&cache), ["ccc", "ddd"]);
    assert!(cache.join("cuda/ccc.cubin.manifest").exists());
    kiln(&cache, &["cache", "clear", "--max-size", "1K"]);
    assert_eq!(present(&cache), ["ddd"]);
    assert!(!cache.join("cuda/ccc.cubin.manifest").exists(), "a cubin goes with its manifest");
    let out = stdout(&kiln(&cache, &["cache", "clear"]));
    assert!(present(&cache).is_empty());
    assert!(out.contains("removed 1 entries"), "{out}");
    // A cache that does not exist is empty, not an error.
    let size = stdout(&kiln(&cache.join("nowhere"), &["cache", "size"]));
    assert!(size.contains("0 B in 0 entries"), "{size}");
}

#[test]
fn a_run_leaves_a_cpu_library_and_the_precompiled_prelude_in_the_cache() {
    let dir = scratch("run");
    let cache = dir.join("cache");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln/tests/golden/metal/myexp/kernel.toml");
    kiln(&cache, &["run", spec.to_str().unwrap(), "--device", "cpu", "--out", dir.to_str().unwrap()]);
    let list = stdout(&kiln(&cache, &["cache", "list"]));
    let kinds: Vec<&str> = list.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert!(kinds.contains(&"cpu") && kinds.contains(&"cpu-pch"), "{list}");
    kiln(&cache, &["cache", "clear"]);
    assert!(std::fs::read_dir(cache.join("cpu")).unwrap().next().is_none());
}
