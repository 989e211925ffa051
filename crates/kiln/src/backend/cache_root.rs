//! The directory this process keeps its kernel caches in: `config::cache_dir()`, until an
//! operation there fails because the directory cannot be written (no space or quota left, a
//! read-only file system, no permission, a file where a directory should be). Then kiln warns
//! once on stderr and, for the rest of the process, reads and writes its caches only in a
//! directory of its own under the system's temporary directory
//! (`kiln-cache-fallback-<pid>-<n>`, private to the user); the operation runs again there, so the
//! call succeeds. If that fails too, the error names both directories. The fallback is removed
//! when the process exits, and those of processes that are gone when a new one is made.
//!
//! Every cache operation goes through [`run`], which hands it the directory to use, so it can be
//! run again in the fallback. Tests give a thread a [`CacheRoot`] of its own ([`with_root`]),
//! so they never move the cache of the other tests in the process.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, Once};

use crate::config;
use crate::error::{Error, Result};

/// The start of a fallback directory's name; the process id and a number follow.
const FALLBACK_PREFIX: &str = "kiln-cache-fallback-";

/// A cache directory and, once it could not be written, the fallback in use instead.
pub struct CacheRoot {
    /// The configured directory (`None`: `config::cache_dir()`, read at each use).
    configured: Option<PathBuf>,
    /// Where a fallback is made (`None`: `std::env::temp_dir()`).
    temp: Option<PathBuf>,
    /// Whether the fallback is removed when the process exits (the process's own root).
    remove_at_exit: bool,
    fallback: Mutex<Option<Fallback>>,
}

#[derive(Clone, Debug)]
struct Fallback {
    dir: PathBuf,
    /// The configured directory and why it could not be written, for a later error.
    configured: PathBuf,
    cause: String,
    /// The process that made it: a child forked since makes its own.
    pid: u32,
}

impl Fallback {
    fn warning(&self) -> String {
        format!(
            "kiln: warning: cannot write the cache directory {} ({}); compiled kernels are cached in {} for the rest \
             of this process instead",
            self.configured.display(),
            self.cause,
            self.dir.display()
        )
    }
}

impl CacheRoot {
    /// A root with its configured directory and the directory its fallback is made in.
    #[cfg(test)]
    pub fn new(configured: PathBuf, temp: PathBuf) -> Self {
        CacheRoot { configured: Some(configured), temp: Some(temp), remove_at_exit: false, fallback: Mutex::new(None) }
    }

    fn of_process() -> Self {
        CacheRoot { configured: None, temp: None, remove_at_exit: true, fallback: Mutex::new(None) }
    }

    fn configured(&self) -> PathBuf {
        self.configured.clone().unwrap_or_else(config::cache_dir)
    }

    fn temp(&self) -> PathBuf {
        self.temp.clone().unwrap_or_else(std::env::temp_dir)
    }

    fn taken(&self) -> Option<Fallback> {
        let slot = self.fallback.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().filter(|f| f.pid == std::process::id()).cloned()
    }

    /// The directory caches are read from and written to now.
    pub fn dir(&self) -> PathBuf {
        self.taken().map(|f| f.dir).unwrap_or_else(|| self.configured())
    }

    /// The warning printed when the fallback was taken, if it was.
    #[cfg(test)]
    pub fn warning(&self) -> Option<String> {
        self.taken().map(|f| f.warning())
    }

    /// Runs `op` in the current directory; when it fails because the configured directory
    /// cannot be written, falls back and runs it once more there.
    pub fn run<T>(&self, mut op: impl FnMut(&Path) -> Result<T>) -> Result<T> {
        let dir = self.dir();
        let first = match op(&dir) {
            Ok(v) => return Ok(v),
            Err(e) if cannot_write(&e) => e,
            Err(e) => return Err(e),
        };
        let fallback = self.fall_back(&dir, &first)?;
        match op(&fallback.dir) {
            Err(e) if cannot_write(&e) => Err(both(&fallback.configured, &fallback.cause, &fallback.dir, &e)),
            other => other,
        }
    }

    /// The fallback after `err` in `tried`: made now (with the warning), or the one another
    /// thread made meanwhile; an error naming both when `tried` was the fallback already or
    /// none can be made.
    fn fall_back(&self, tried: &Path, err: &Error) -> Result<Fallback> {
        let mut slot = self.fallback.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = slot.as_ref().filter(|f| f.pid == std::process::id()) {
            if f.dir == tried {
                return Err(both(&f.configured, &f.cause, &f.dir, err));
            }
            return Ok(f.clone());
        }
        let temp = self.temp();
        remove_stale(&temp);
        let dir = make_fallback(&temp).map_err(|e| both(tried, &err.to_string(), &temp, &Error::io(&temp, e)))?;
        if self.remove_at_exit {
            remove_at_exit(&dir);
        }
        let f = Fallback { dir, configured: tried.to_path_buf(), cause: err.to_string(), pid: std::process::id() };
        eprintln!("{}", f.warning());
        *slot = Some(f.clone());
        Ok(f)
    }
}

/// Whether `e` says a directory cannot be written (rather than, say, a kernel that does not
/// compile).
fn cannot_write(e: &Error) -> bool {
    let Error::Io { source, .. } = e else { return false };
    matches!(
        source.kind(),
        ErrorKind::StorageFull
            | ErrorKind::QuotaExceeded
            | ErrorKind::FileTooLarge
            | ErrorKind::ReadOnlyFilesystem
            | ErrorKind::PermissionDenied
            | ErrorKind::NotADirectory
            // A file where a directory is to be created.
            | ErrorKind::AlreadyExists
    )
}

/// The error of a cache directory that could not be written (`cause`) and of a fallback that
/// could not be written either (`err`).
fn both(configured: &Path, cause: &str, fallback: &Path, err: &Error) -> Error {
    let kind = match err {
        Error::Io { source, .. } => source.kind(),
        _ => ErrorKind::Other,
    };
    let msg = format!("cannot be written ({cause}), and neither can the fallback {} ({err})", fallback.display());
    Error::io(configured, std::io::Error::new(kind, msg))
}

/// What a compiler's messages (`stderr`) say when it could not write its output `path` because
/// of the disk, as the I/O error it met; `None` when they say nothing of the kind. The
/// messages are the C library's, as the compiler prints them.
pub fn compiler_could_not_write(stderr: &str, path: &Path) -> Option<Error> {
    const SAID: [(&str, ErrorKind); 4] = [
        ("No space left on device", ErrorKind::StorageFull),
        ("Disk quota exceeded", ErrorKind::QuotaExceeded),
        ("Disc quota exceeded", ErrorKind::QuotaExceeded),
        ("Read-only file system", ErrorKind::ReadOnlyFilesystem),
    ];
    let (line, kind) = stderr.lines().find_map(|l| SAID.iter().find(|(s, _)| l.contains(s)).map(|(_, k)| (l, *k)))?;
    Some(Error::io(path, std::io::Error::new(kind, line.trim().to_string())))
}

/// Makes a new directory of this process's own under `temp`, readable by its user alone.
fn make_fallback(temp: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(temp)?;
    let pid = std::process::id();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let mut last = std::io::Error::from(ErrorKind::AlreadyExists);
    for n in 0..16u32 {
        let dir = temp.join(format!("{FALLBACK_PREFIX}{pid}-{}", nanos.wrapping_add(n)));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// The process id in a fallback directory's name (`kiln-cache-fallback-<pid>-<n>`); `None` for
/// any other name.
fn fallback_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(FALLBACK_PREFIX)?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok()).flatten()
}

/// Removes the fallback directories in `temp` of processes that no longer run (Linux:
/// `/proc/<pid>`; elsewhere they are left to the exit of their process).
fn remove_stale(temp: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(temp) else { return };
    for entry in entries.flatten() {
        let Some(pid) = fallback_pid(&entry.file_name().to_string_lossy()) else { continue };
        if !Path::new("/proc").join(pid.to_string()).exists() && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The process's fallback, removed by `exit`.
static TO_REMOVE: Mutex<Option<(u32, PathBuf)>> = Mutex::new(None);

extern "C" fn remove_fallback() {
    // At exit a thread may still hold the lock: then the fallback stays for `remove_stale`.
    if let Ok(slot) = TO_REMOVE.try_lock() {
        if let Some((_, dir)) = slot.as_ref().filter(|(pid, _)| *pid == std::process::id()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

fn remove_at_exit(dir: &Path) {
    static REGISTERED: Once = Once::new();
    if let Ok(mut slot) = TO_REMOVE.lock() {
        *slot = Some((std::process::id(), dir.to_path_buf()));
    }
    // SAFETY: `atexit` stores a plain function pointer, called once by `exit`; the handler
    // only removes a directory named in a process-wide slot.
    REGISTERED.call_once(|| unsafe {
        atexit(remove_fallback);
    });
}

static PROCESS: LazyLock<CacheRoot> = LazyLock::new(CacheRoot::of_process);

#[cfg(test)]
thread_local! {
    static TEST_ROOT: std::cell::RefCell<Option<std::sync::Arc<CacheRoot>>> = const { std::cell::RefCell::new(None) };
}

fn with_current<R>(f: impl FnOnce(&CacheRoot) -> R) -> R {
    #[cfg(test)]
    if let Some(root) = TEST_ROOT.with(|r| r.borrow().clone()) {
        return f(&root);
    }
    f(&PROCESS)
}

/// The directory this process's caches are read from and written to now.
pub fn dir() -> PathBuf {
    with_current(|r| r.dir())
}

/// Runs the cache operation `op` in this process's cache directory (see [`CacheRoot::run`]).
pub fn run<T>(op: impl FnMut(&Path) -> Result<T>) -> Result<T> {
    with_current(|r| r.run(op))
}

/// Runs `f` with the caches of this thread in `root`.
#[cfg(test)]
pub fn with_root<R>(root: std::sync::Arc<CacheRoot>, f: impl FnOnce() -> R) -> R {
    let before = TEST_ROOT.with(|r| r.replace(Some(root)));
    let out = f();
    TEST_ROOT.with(|r| r.replace(before));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of the test's own holding `file`, a regular file: a cache directory under it
    /// cannot be made, even by root.
    fn scratch(tag: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("kiln-cache-root-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, b"not a directory").unwrap();
        (dir, file)
    }

    fn write_entry(dir: &Path) -> Result<PathBuf> {
        let entry = dir.join("cpu").join("key");
        std::fs::create_dir_all(&entry).map_err(|e| Error::io(&entry, e))?;
        let so = entry.join("kernel.so");
        std::fs::write(&so, b"library").map_err(|e| Error::io(&so, e))?;
        Ok(so)
    }

    #[test]
    fn a_cache_directory_under_a_file_falls_back_once_and_for_the_rest_of_the_process() {
        let (dir, file) = scratch("fallback");
        let configured = file.join("cache");
        let root = CacheRoot::new(configured.clone(), dir.join("tmp"));
        let mut tried = Vec::new();
        let so = root
            .run(|d| {
                tried.push(d.to_path_buf());
                write_entry(d)
            })
            .unwrap();
        let fallback = root.dir();
        assert_eq!(tried, vec![configured.clone(), fallback.clone()]);
        assert!(so.starts_with(&fallback) && so.exists());
        assert_eq!(fallback.parent(), Some(&*dir.join("tmp")));
        assert_eq!(fallback_pid(&fallback.file_name().unwrap().to_string_lossy()), Some(std::process::id()));
        let warning = root.warning().unwrap();
        assert!(warning.contains(&*configured.to_string_lossy()), "{warning}");
        assert!(warning.contains(&*fallback.to_string_lossy()), "{warning}");
        assert!(warning.contains("Not a directory"), "{warning}");

        // Later operations go to the fallback directly.
        let mut tried = Vec::new();
        root.run(|d| {
            tried.push(d.to_path_buf());
            write_entry(d)
        })
        .unwrap();
        assert_eq!(tried, vec![fallback]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn when_the_fallback_cannot_be_written_either_the_error_names_both() {
        let (dir, file) = scratch("both");
        let configured = file.join("cache");
        let temp = file.join("tmp");
        let root = CacheRoot::new(configured.clone(), temp.clone());
        let err = root.run(write_entry).unwrap_err().to_string();
        assert!(err.contains(&*configured.to_string_lossy()), "{err}");
        assert!(err.contains(&*temp.to_string_lossy()), "{err}");
        assert_eq!(root.dir(), configured, "no fallback was taken");

        // A fallback made but full by the time it is written: both named too.
        let root = CacheRoot::new(configured.clone(), dir.join("tmp"));
        let err = root
            .run(|d| {
                let entry = d.join("kernel.so");
                Err::<(), _>(Error::io(entry, std::io::Error::from(ErrorKind::StorageFull)))
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains(&*configured.to_string_lossy()) && err.contains(&*root.dir().to_string_lossy()), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn failures_that_are_not_about_writing_do_not_fall_back() {
        let (dir, _) = scratch("other");
        let root = CacheRoot::new(dir.join("cache"), dir.join("tmp"));
        let compile = || Error::Compile { backend: "cpu", kernel: "k".into(), log: "error: expected ';'".into() };
        let missing = || Error::io(dir.join("absent"), std::io::Error::from(ErrorKind::NotFound));
        for make in [&compile as &dyn Fn() -> Error, &missing] {
            let mut runs = 0;
            assert!(root
                .run(|_| {
                    runs += 1;
                    Err::<(), _>(make())
                })
                .is_err());
            assert_eq!(runs, 1);
        }
        assert_eq!(root.dir(), dir.join("cache"));
        assert!(!dir.join("tmp").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_compiler_that_found_the_disk_full_reads_as_the_disk_full() {
        let so = Path::new("/cache/cpu/key/kernel.so");
        let log =
            "collect2: error: ld returned 1 exit status\n/usr/bin/ld: final link failed: No space left on device\n";
        let err = compiler_could_not_write(log, so).unwrap();
        assert!(cannot_write(&err));
        assert!(err.to_string().contains("final link failed"), "{err}");
        assert!(compiler_could_not_write("error: expected ';' before '}' token", so).is_none());
    }

    #[test]
    fn fallbacks_of_processes_that_are_gone_are_removed_and_nothing_else() {
        let (dir, file) = scratch("stale");
        let temp = dir.join("tmp");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let names = [
            format!("{FALLBACK_PREFIX}{gone}-7"),
            format!("{FALLBACK_PREFIX}{}-7", std::process::id()),
            format!("{FALLBACK_PREFIX}{gone}-7-x"),
            format!("{FALLBACK_PREFIX}{gone}"),
            format!("kiln-cache-{gone}-7"),
        ];
        for n in &names {
            std::fs::create_dir_all(temp.join(n)).unwrap();
        }
        let root = CacheRoot::new(file.join("cache"), temp.clone());
        root.run(write_entry).unwrap();
        let left: Vec<bool> = names.iter().map(|n| temp.join(n).exists()).collect();
        let on_linux = Path::new("/proc/self").exists();
        assert_eq!(left, [!on_linux, true, true, true, true]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
