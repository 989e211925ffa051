//! The `kiln` binary when the disk is in the way: a cache directory it cannot write, and the
//! temporary outputs a killed run left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch directory unique to one test, holding `file`, a regular file: a directory under it
/// cannot be made, even by root.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-disk-trouble-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("file"), b"not a directory").unwrap();
    dir
}

/// A spec of a kernel of its own (`tag` makes its source unique) doubling `x` into `out`.
fn spec(dir: &Path, tag: &str) -> PathBuf {
    kiln::Array::from_vec(&[4], vec![0.75f32, -1.5, 2.25, 3.0]).unwrap().save_npy(dir.join("x.npy")).unwrap();
    let text = format!(
        "[kernel]\nname = \"twice\"\ninput_names = [\"x\"]\noutput_names = [\"out\"]\nsource = '''\n    // {tag} {}\n    \
         uint i = thread_position_in_grid.x;\n    out[i] = x[i] * 2.0f;\n'''\n\n[call]\ngrid = [4, 1, 1]\n\
         threadgroup = [4, 1, 1]\noutput_shapes = [[4]]\noutput_dtypes = [\"float32\"]\n\n[[input]]\nfile = \"x.npy\"\n",
        std::process::id()
    );
    let path = dir.join("spec.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `kiln run` of `spec` into `out` on the CPU, with the cache directory `cache` and the temporary
/// directory `tmp` where given.
fn run(spec: &Path, out: &Path, cache_and_tmp: Option<(&Path, &Path)>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command.args(["run", spec.to_str().unwrap(), "--device", "cpu", "--out", out.to_str().unwrap()]);
    if let Some((cache, tmp)) = cache_and_tmp {
        command.env("KILN_CACHE_DIR", cache).env("TMPDIR", tmp);
    }
    command.output().unwrap()
}

fn doubled(out: &Path) -> Vec<f32> {
    kiln::Array::load_npy(out.join("out.npy")).unwrap().to_vec::<f32>().unwrap()
}

fn fallbacks_in(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
    names.filter(|n| n.starts_with("kiln-cache-fallback-")).collect()
}

#[test]
fn a_cache_directory_that_cannot_be_made_costs_a_warning_not_the_run() {
    let dir = scratch("fallback");
    let (cache, tmp) = (dir.join("file/cache"), dir.join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let out = run(&spec(&dir, "fallback"), &dir.join("out"), Some((&cache, &tmp)));
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert_eq!(doubled(&dir.join("out")), [1.5, -3.0, 4.5, 6.0]);
    assert!(log.contains(&format!("cannot write the cache directory {}", cache.display())), "{log}");
    assert!(log.contains("Not a directory"), "{log}");
    assert!(log.contains(&*tmp.join("kiln-cache-fallback-").to_string_lossy()), "{log}");
    assert_eq!(log.matches("cannot write the cache directory").count(), 1, "one warning: {log}");
    assert_eq!(fallbacks_in(&tmp), Vec::<String>::new(), "the fallback is removed at exit");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn when_the_fallback_cannot_be_made_either_the_error_names_both_directories() {
    let dir = scratch("both");
    let (cache, tmp) = (dir.join("file/cache"), dir.join("file/tmp"));
    let out = run(&spec(&dir, "both"), &dir.join("out"), Some((&cache, &tmp)));
    let log = stderr(&out);
    assert!(!out.status.success(), "{log}");
    assert!(log.contains(&*cache.to_string_lossy()) && log.contains(&*tmp.to_string_lossy()), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn temporary_outputs_of_processes_that_are_gone_are_removed_by_the_next_run() {
    let dir = scratch("stale");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let live = std::process::id();
    // Dated two hours back, so they are stale where there is no /proc to ask too.
    let old = SystemTime::now() - Duration::from_secs(7200);
    let file = |name: &str, when: Option<SystemTime>| {
        let path = out_dir.join(name);
        std::fs::write(&path, b"half an npy").unwrap();
        if let Some(when) = when {
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
        }
        name.to_string()
    };
    let stale = [file(&format!(".out.npy.{gone}-0.tmp"), Some(old)), file(&format!(".y.npy.{gone}-3.tmp"), Some(old))];
    let kept = [
        file(&format!(".out.npy.{live}-0.tmp"), None),
        file(&format!(".out.npy.{gone}-0.tmp.bak"), Some(old)),
        file(&format!("out.npy.{gone}-0.tmp"), Some(old)),
        file(&format!(".out.npy.{gone}.tmp"), Some(old)),
        file("notes.txt", Some(old)),
    ];
    let not_a_file = format!(".z.npy.{gone}-0.tmp");
    std::fs::create_dir_all(out_dir.join(&not_a_file)).unwrap();
    let out = run(&spec(&dir, "stale"), &out_dir, None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(doubled(&out_dir), [1.5, -3.0, 4.5, 6.0]);
    for name in &stale {
        assert!(!out_dir.join(name).exists(), "{name} is removed");
    }
    for name in kept.iter().chain([&not_a_file]) {
        assert!(out_dir.join(name).exists(), "{name} is kept");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
