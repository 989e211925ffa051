//! The corpus: whole Metal files of candle, ggml and MLX as they are published (copied byte
//! for byte under `tests/data/<library>/`, with `SOURCE.md` naming repository, commit, path and
//! licence), each opened as its library's host code builds it.

use std::path::{Path, PathBuf};

use kiln::source::lower::{lower, LowerTarget};
use kiln::{LibraryLaunch, MetalLibrary};

/// One `.metal` file of a library.
#[derive(Clone, Debug)]
pub struct CorpusFile {
    /// `candle`, `ggml` or `mlx`.
    pub library: &'static str,
    /// The path under `tests/data/<library>/`.
    pub path: String,
}

pub fn data_dir() -> PathBuf {
    crate::common::test_data("data")
}

/// The macros each library's host code defines when it compiles its files.
pub fn defines(library: &str) -> &'static [(&'static str, &'static str)] {
    match library {
        // ggml-metal-device.m, ggml_metal_library_init: bfloat where the device has it (every
        // Metal 3.1 device); the tensor API (Metal 4) is left out.
        "ggml" => &[("GGML_METAL_HAS_BF16", "1")],
        _ => &[],
    }
}

impl CorpusFile {
    pub fn full_path(&self) -> PathBuf {
        data_dir().join(self.library).join(&self.path)
    }

    /// A short name for reports: `candle/unary.metal`.
    pub fn label(&self) -> String {
        let short = self.path.rsplit("kernels/").next().unwrap_or(&self.path);
        format!("{}/{short}", self.library)
    }

    /// The file as a library, with the include directories its build passes.
    pub fn library(&self) -> MetalLibrary {
        let lib = MetalLibrary::from_file(self.full_path()).unwrap_or_else(|e| panic!("{}: {e}", self.label()));
        let lib = lib.defines(defines(self.library).iter().map(|(n, v)| (n.to_string(), v.to_string())));
        match self.library {
            // The kernels include "mlx/backend/metal/kernels/..." from the repository root.
            "mlx" => lib.include_dirs([data_dir().join("mlx")]),
            _ => lib,
        }
    }

    /// The host names of every kernel (instantiation) of the file, or the translation error.
    pub fn entries(&self) -> Result<Vec<String>, String> {
        let program = self.library().program(&LibraryLaunch::threads("", 1usize, 1usize));
        let module = lower(&program, LowerTarget::Cpu).map_err(|e| e.to_string())?;
        Ok(module.entries.iter().map(|e| e.host_name.clone()).collect())
    }
}

/// Every file of the corpus, in a fixed order.
pub fn files() -> Vec<CorpusFile> {
    let mut out = Vec::new();
    for library in ["candle", "ggml", "mlx"] {
        let root = data_dir().join(library);
        let mut found = Vec::new();
        collect(&root, &root, &mut found);
        found.sort();
        out.extend(found.into_iter().map(|path| CorpusFile { library, path }));
    }
    out
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(read) = std::fs::read_dir(dir) else { return };
    for entry in read.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "metal") {
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
}
