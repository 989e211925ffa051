//! A lowered body-only (MLX) kernel in the form MLX's `mx.fast.cuda_kernel` takes: a header
//! and a body that MLX wraps in its own `__global__` function and launches on its stream.
//!
//! The header holds kiln's CUDA prelude (skipped where it is already there, as in kiln's own
//! `CudaKernel`, which compiles after it), the lowered kernel as a device function and an entry
//! shim, `kiln_mlx_entry`, which maps CUDA's indices to Metal's attributes. The prelude is
//! about 360 KB of text, and MLX copies a `cuda_kernel`'s header into the source of every call
//! and hashes that source at every evaluation; so the header names the prelude by an
//! `#include` of a file in kiln's cache directory where one can be written (`prelude_file`,
//! named by its contents' hash; NVRTC reads absolute include paths from the file system), and
//! holds it inline otherwise. The body is one
//! call of the shim with the parameters MLX generated (`x`, `x_shape.data()`, `&x_ndim`,
//! `out`), one per Metal buffer slot, cast in place to the Metal parameter types: MLX passes
//! plain pointers, which become `constant` references, `atomic<T>*` outputs and so on.
//!
//! MLX covers a grid of threads with `ceil(grid / threadgroup)` whole blocks of
//! `min(threadgroup, grid)` threads, one launch, so a grid that is not a multiple of the
//! threadgroup gets partial groups padded to whole blocks. There the shim reads the true grid
//! from an extra input, gives a partial group's Metal threads the block's first linear
//! indices (so its SIMD groups are the block's warps, as Metal forms them from the linear
//! index within the actual group) and ends the other threads at once. An exited thread takes no
//! part in a block barrier (a barrier waits for the threads of the block that have not exited),
//! so `threadgroup_barrier` stays the block barrier it is on every launch: exactly `grid`
//! threads run and every barrier is the whole group's.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::emit::{builtin_value_in, emit_user_code, shared_prelude};
use crate::backend::{cache_root, disk_cache};
use crate::error::Error;
use crate::source::lower::{Entry, EntryParam, LoweredModule};

/// The name of the kernel entry shim the body calls.
pub const ENTRY_SHIM: &str = "kiln_mlx_entry";

/// The header and body given to `mx.fast.cuda_kernel` for one lowered kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MlxCudaText {
    /// Text before MLX's `namespace mlx::core::cu` (after MLX's own includes).
    pub header: String,
    /// The body of MLX's `__global__` function.
    pub body: String,
}

/// How the shim learns the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridSource<'a> {
    /// The grid is a whole number of threadgroups: it is the launch's own
    /// (`gridDim * blockDim`) and every thread of every block runs.
    Launch,
    /// Partial threadgroups: the grid's three `uint32` sizes come in the input named here.
    Input(&'a str),
}

/// Where the header gets kiln's CUDA prelude from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreludeSource<'a> {
    /// The prelude's text, in the header.
    Inline,
    /// An `#include` of the file at this absolute path, which holds [`prelude_file_text`].
    Include(&'a Path),
}

/// Emits the header and body of `entry` of `module` (a lowered body-only kernel named
/// `kernel`). `slots[i]` is the expression of MLX's parameters that holds Metal buffer `i`;
/// `restrict_pointers` marks read-only slots `__restrict__` (MLX's inputs are read-only and its
/// outputs fresh).
pub fn emit(
    module: &LoweredModule,
    kernel: &str,
    entry: &Entry,
    slots: &[String],
    grid: GridSource<'_>,
    restrict_pointers: bool,
    prelude: PreludeSource<'_>,
) -> MlxCudaText {
    let mut header = String::new();
    let _ = writeln!(
        header,
        "// kiln: the Metal kernel `{}` lowered to CUDA for mx.fast.cuda_kernel.",
        kernel.replace('\n', " ")
    );
    // kiln's own CudaKernel compiles its programs after this prelude already.
    header.push_str("#ifndef KILN_CUDA\n");
    match prelude {
        PreludeSource::Include(path) => {
            let _ = writeln!(header, "#include \"{}\"", path.display());
        }
        PreludeSource::Inline => header.push_str(prelude_file_text()),
    }
    header.push_str("#endif\nnamespace kiln_metal {\n");
    emit_user_code(&mut header, module, kernel, true);
    header.push_str("#line 1 \"kiln-mlx-entry\"\n");
    header.push_str(&shim(entry, grid, restrict_pointers, module.code.contains("kiln::oslog::print")));
    header.push_str("}  // namespace kiln_user\n}  // namespace kiln_metal\n#line 1 \"mlx-cuda-kernel\"\n");

    let mut args: Vec<String> = Vec::new();
    if let GridSource::Input(name) = grid {
        args.push(name.to_string());
    }
    args.extend(entry.params.iter().filter_map(|p| match p {
        EntryParam::Buffer { index, .. } => {
            Some(slots.get(*index as usize).cloned().unwrap_or_else(|| "nullptr".into()))
        }
        _ => None,
    }));
    let body = format!("  ::kiln_metal::kiln_user::{ENTRY_SHIM}({});\n", args.join(", "));
    MlxCudaText { header, body }
}

/// The prelude as the header holds it or includes it: kiln's CUDA prelude between the pragmas
/// that quiet what MLX's includes make of it.
pub fn prelude_file_text() -> &'static str {
    &prelude_file_contents().0
}

/// The prelude file's text and its name (from the text's hash), made once.
fn prelude_file_contents() -> &'static (String, String) {
    static CONTENTS: OnceLock<(String, String)> = OnceLock::new();
    CONTENTS.get_or_init(|| {
        let text = format!("{PRELUDE_OPEN}{}#pragma nv_diagnostic pop\n", shared_prelude());
        let name = format!("kiln-prelude-{:016x}.cuh", crate::program::fx(0, text.as_bytes()));
        (text, name)
    })
}

/// The file a header includes for the prelude: `mlx-cuda/kiln-prelude-<hash>.cuh` in kiln's
/// cache directory (its fallback where that cannot be written), written once and again
/// whenever it has gone. `None` where it cannot be written or its path cannot stand in an
/// `#include` (a quote, a backslash or a control character in it): the header then holds
/// the prelude inline.
pub fn prelude_file() -> Option<PathBuf> {
    let (text, name) = prelude_file_contents();
    let path = cache_root::run(|root| {
        let dir = root.join("mlx-cuda");
        let path = dir.join(name);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == text.len() as u64) {
            return Ok(path);
        }
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        disk_cache::write_atomically(&path, text.as_bytes()).map_err(|e| Error::io(&path, e))?;
        Ok(path)
    })
    .ok()?;
    let includable = path.is_absolute()
        && path.to_str().is_some_and(|p| !p.chars().any(|c| c == '"' || c == '\\' || c.is_control()));
    includable.then_some(path)
}

/// Before the prelude: MLX's includes (CUDA's `<cuda/std/cmath>`, `<cuda/std/cfloat>`) define
/// C's versions of macros the prelude defines as Metal does (`INFINITY`, `FLT_MAX`, ...), which
/// the prelude's definitions replace, and the prelude declares constants a kernel may not use.
const PRELUDE_OPEN: &str = "#pragma nv_diagnostic push\n#pragma nv_diag_suppress 47\n#pragma nv_diag_suppress 177\n";

/// The shim: Metal's attributes from CUDA's indices, then the call of the lowered kernel.
fn shim(entry: &Entry, grid: GridSource<'_>, restrict_pointers: bool, logs: bool) -> String {
    let mut params = Vec::new();
    if matches!(grid, GridSource::Input(_)) {
        params.push("const void* kiln_grid".to_string());
    }
    let mut args = Vec::new();
    for (position, p) in entry.params.iter().enumerate() {
        args.push(match p {
            EntryParam::Buffer { index, by_ref, is_const, .. } => {
                let name = format!("kiln_b{index}");
                let qualifier = match (*is_const, restrict_pointers) {
                    (true, true) => "const void* __restrict__",
                    (true, false) => "const void*",
                    (false, _) => "void*",
                };
                params.push(format!("{qualifier} {name}"));
                let ty = format!("kiln_sig::param<{position}>");
                if *by_ref {
                    format!("*static_cast<kiln::unref<{ty}>::type*>({name})")
                } else {
                    format!("static_cast<{ty}>({name})")
                }
            }
            // Body-only kernels have no dynamic threadgroup memory.
            EntryParam::Threadgroup { .. } => "nullptr".to_string(),
            EntryParam::Builtin { attribute, ty, .. } => builtin_value_in(
                attribute,
                ty,
                ["kiln_grid_size[0]", "kiln_grid_size[1]", "kiln_grid_size[2]"],
                ["gridDim.x", "gridDim.y", "gridDim.z"],
            ),
        });
    }
    let mut s = String::new();
    let _ = writeln!(s, "__device__ __forceinline__ void {ENTRY_SHIM}(\n    {}) {{", params.join(",\n    "));
    s.push_str("  const unsigned gx = blockIdx.x, gy = blockIdx.y, gz = blockIdx.z;\n");
    s.push_str("  const unsigned ux = blockDim.x, uy = blockDim.y, uz = blockDim.z;\n");
    match grid {
        GridSource::Launch => s.push_str(WHOLE_GROUPS),
        GridSource::Input(_) => {
            s.push_str(PADDED_GROUPS);
            s.push_str("  if (lin >= ntg) return;\n");
            s.push_str(PADDED_POSITION);
        }
    }
    s.push_str("  (void)gx; (void)gy; (void)gz; (void)tx; (void)ty; (void)tz; (void)ux; (void)uy; (void)uz;\n");
    s.push_str("  (void)lin; (void)ntg; (void)kiln_grid_size;\n");
    if logs {
        s.push_str("  kiln::oslog::set_group(gx, gy, gz);\n");
    }
    let _ = writeln!(s, "  using kiln_sig = kiln::signature<decltype({})>;", entry.callee);
    let _ = writeln!(s, "  {}(\n    {});", entry.callee, args.join(",\n    "));
    s.push_str("}\n");
    s
}

/// Locals of a launch of whole groups: every block is a whole threadgroup.
const WHOLE_GROUPS: &str = r#"  const unsigned tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const unsigned nx = ux, ny = uy, nz = uz;
  const unsigned lin = tx + nx * (ty + ny * tz);
  const unsigned ntg = nx * ny * nz;
  const unsigned kiln_grid_size[3] = {gridDim.x * ux, gridDim.y * uy, gridDim.z * uz};
"#;

/// Locals of a launch whose edge blocks are padded: the actual group size, and the block's
/// linear index, which is the Metal thread's index within its group.
const PADDED_GROUPS: &str = r#"  const unsigned* kiln_g = static_cast<const unsigned*>(kiln_grid);
  const unsigned kiln_grid_size[3] = {kiln_g[0], kiln_g[1], kiln_g[2]};
  const unsigned kiln_rx = kiln_grid_size[0] - gx * ux, kiln_ry = kiln_grid_size[1] - gy * uy;
  const unsigned kiln_rz = kiln_grid_size[2] - gz * uz;
  const unsigned nx = kiln_rx < ux ? kiln_rx : ux, ny = kiln_ry < uy ? kiln_ry : uy, nz = kiln_rz < uz ? kiln_rz : uz;
  const unsigned ntg = nx * ny * nz;
  const unsigned lin = threadIdx.x + ux * (threadIdx.y + uy * threadIdx.z);
"#;

/// The position in the group of a thread of a padded launch: linearised with the actual group
/// size, x fastest (in a whole group, the block's own position).
const PADDED_POSITION: &str = r#"  const bool kiln_whole = ntg == ux * uy * uz;
  const unsigned tx = kiln_whole ? threadIdx.x : lin % nx;
  const unsigned ty = kiln_whole ? threadIdx.y : (lin / nx) % ny;
  const unsigned tz = kiln_whole ? threadIdx.z : lin / (nx * ny);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache root of the test's own under the temporary directory (removed afterwards).
    fn scratch_root(tag: &str) -> (PathBuf, std::sync::Arc<cache_root::CacheRoot>) {
        let scratch = std::env::temp_dir().join(format!("kiln-mlx-prelude-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        let root = std::sync::Arc::new(cache_root::CacheRoot::new(scratch.join("cache"), scratch.join("tmp")));
        (scratch, root)
    }

    #[test]
    fn the_prelude_file_holds_the_prelude_and_is_written_again_when_gone() {
        let (scratch, root) = scratch_root("gone");
        cache_root::with_root(root, || {
            let path = prelude_file().expect("a writable cache directory");
            assert!(path.starts_with(scratch.join("cache").join("mlx-cuda")), "{}", path.display());
            assert_eq!(std::fs::read_to_string(&path).unwrap(), prelude_file_text());
            std::fs::remove_file(&path).unwrap();
            assert_eq!(prelude_file().as_deref(), Some(path.as_path()));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), prelude_file_text());
            // A truncated file is replaced too.
            std::fs::write(&path, "#error truncated\n").unwrap();
            assert_eq!(prelude_file().as_deref(), Some(path.as_path()));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), prelude_file_text());
        });
        let _ = std::fs::remove_dir_all(&scratch);
    }

    #[test]
    fn a_path_an_include_cannot_name_keeps_the_prelude_inline() {
        let (scratch, _) = scratch_root("quote");
        let quoted = std::sync::Arc::new(cache_root::CacheRoot::new(scratch.join("a\"b"), scratch.join("tmp")));
        cache_root::with_root(quoted, || assert_eq!(prelude_file(), None));
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
