//! Kernel spec files: the TOML contract of `kiln run` and `kiln translate` (docs/design.md, "Kernel
//! spec files"). A `[kernel]` + `[call]` + `[[input]]` file describes a body-only
//! `metal_kernel` call; a `[library]` + `[dispatch]` + `[[buffer]]` file a full `.metal` file.
//! Unknown keys, missing files and malformed values are errors naming the file and the key.

mod inputs;
mod run;
mod toml_access;

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::{Table, Value};

use kiln::array::Array;
use kiln::backend::{self, ConstantKey, ConstantValue, Dispatch, MetalProgram, Target};
use kiln::error::{Error, Result};
use kiln::kernel::{KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel, MetalLibrary};
use kiln::source::mangle::{TemplateArg, TemplateName};
use toml_access::{spec_err, usize_list, Section};

/// A parsed spec file, ready to translate or run.
// One value per spec file: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum KernelSpec {
    /// A body-only kernel call.
    Body(BodySpec),
    /// A full `.metal` file dispatch.
    Library(LibrarySpec),
}

/// `[kernel]`, `[call]` and `[[input]]`.
#[derive(Clone, Debug)]
pub struct BodySpec {
    pub file: PathBuf,
    pub kernel: MetalKernel,
    pub output_names: Vec<String>,
    pub call: LaunchSpec,
    pub inputs: Vec<KernelInput>,
    /// The `timeout` key (see [`KernelSpec::timeout`]).
    pub timeout: Option<Duration>,
}

/// `[library]`, `[dispatch]` and `[[buffer]]`.
#[derive(Clone, Debug)]
pub struct LibrarySpec {
    pub file: PathBuf,
    pub library: MetalLibrary,
    pub launch: LibraryLaunch,
    /// One per `[[buffer]]`, with the output name for outputs and in/out buffers.
    pub buffers: Vec<(Option<String>, LibraryArg)>,
    /// The `timeout` key (see [`KernelSpec::timeout`]).
    pub timeout: Option<Duration>,
}

impl KernelSpec {
    /// Reads and validates a spec file (inputs are loaded to the host).
    pub fn load(path: impl AsRef<Path>) -> Result<KernelSpec> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        KernelSpec::parse(path, &text)
    }

    /// Parses spec text; `path` locates relative files and labels errors.
    pub fn parse(path: &Path, text: &str) -> Result<KernelSpec> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| spec_err(path, "", e.to_string()))?;
        let root = Section::new(path, "", &table);
        if root.has("kernel") {
            root.only_keys(&["kernel", "call", "input"])?;
            Ok(KernelSpec::Body(parse_body(&root)?))
        } else if root.has("library") {
            root.only_keys(&["library", "dispatch", "buffer"])?;
            Ok(KernelSpec::Library(parse_library(&root)?))
        } else {
            Err(spec_err(
                path,
                "",
                "expected a [kernel] table (body-only kernel) or a [library] table (full .metal file)",
            ))
        }
    }

    /// The text `target` compiles: for `Target::Metal`, what MLX prints between the fences of
    /// `verbose=True` (the generated source) or the full file unchanged.
    pub fn translate(&self, target: Target) -> Result<String> {
        backend::translate(&self.program()?, target)
    }

    /// The program a backend compiles for this spec (validating a body-only call as MLX does).
    pub fn program(&self) -> Result<MetalProgram> {
        match self {
            KernelSpec::Body(b) => {
                let arrays: Vec<Array> = b.inputs.iter().map(KernelInput::to_array).collect();
                Ok(b.kernel.program(&b.kernel.generate(&arrays, &b.call)?))
            }
            KernelSpec::Library(l) => Ok(l.library.program(&l.launch)),
        }
    }
}

fn parse_body(root: &Section<'_>) -> Result<BodySpec> {
    let file = root.file;
    let k = root.sub_table("kernel")?.ok_or_else(|| root.err("kernel", "missing [kernel] table"))?;
    k.only_keys(&[
        "name",
        "input_names",
        "output_names",
        "source",
        "header",
        "ensure_row_contiguous",
        "atomic_outputs",
        "math_mode",
    ])?;
    let name = k.req_str("name")?;
    let input_names = k.strings("input_names")?;
    let output_names = k.strings("output_names")?;
    for (i, out) in output_names.iter().enumerate() {
        let key = format!("output_names[{i}]");
        check_output_name(out).map_err(|msg| k.err(&key, msg))?;
        if let Some(first) = output_names[..i].iter().position(|n| n == out) {
            return Err(k.err(
                &key,
                format!("output name {out:?} is already used by output_names[{first}]; output names must be unique"),
            ));
        }
    }
    let source = k.req_str("source")?;
    let in_refs: Vec<&str> = input_names.iter().map(String::as_str).collect();
    let out_refs: Vec<&str> = output_names.iter().map(String::as_str).collect();
    let mut kernel =
        MetalKernel::new(name, &in_refs, &out_refs, source).map_err(|e| k.err("output_names", e.to_string()))?;
    if let Some(h) = k.str("header")? {
        kernel = kernel.header(h);
    }
    if let Some(b) = k.bool("ensure_row_contiguous")? {
        kernel = kernel.ensure_row_contiguous(b);
    }
    if let Some(b) = k.bool("atomic_outputs")? {
        kernel = kernel.atomic_outputs(b);
    }
    if let Some(m) = k.str("math_mode")? {
        kernel = kernel.math_mode(m.parse::<MathMode>().map_err(|e| k.err("math_mode", e.to_string()))?);
    }

    let c = root.sub_table("call")?.ok_or_else(|| root.err("call", "missing [call] table"))?;
    c.only_keys(&[
        "grid",
        "threadgroup",
        "output_shapes",
        "output_dtypes",
        "template",
        "init_value",
        "verbose",
        "timeout",
    ])?;
    let mut call = LaunchSpec::new(c.dims3("grid")?, c.dims3("threadgroup")?);
    for (i, v) in c.array("output_shapes")?.iter().enumerate() {
        call.output_shapes.push(usize_list(file, &format!("call.output_shapes[{i}]"), v)?.into());
    }
    for (i, name) in c.strings("output_dtypes")?.iter().enumerate() {
        let d = kiln::DType::from_name(name)
            .ok_or_else(|| c.err(&format!("output_dtypes[{i}]"), toml_access::unknown_dtype(name)))?;
        call.output_dtypes.push(d);
    }
    for (key, n) in [("output_shapes", call.output_shapes.len()), ("output_dtypes", call.output_dtypes.len())] {
        if n != output_names.len() {
            return Err(c.err(
                key,
                format!("Expected `{key}` to have size {} but got size {n} (one per output name)", output_names.len()),
            ));
        }
    }
    if c.has("template") {
        for (i, item) in c.array("template")?.iter().enumerate() {
            call.template.push(parse_template_item(&c, i, item)?);
        }
    }
    call.init_value = c.number("init_value")?;
    call.verbose = c.bool("verbose")?.unwrap_or(false);
    let timeout = c.seconds("timeout")?;

    let input_tables = root.tables("input")?;
    if input_tables.len() != input_names.len() {
        return Err(root.err(
            "input",
            format!(
                "{} [[input]] tables for {} input_names; give one per input, in order",
                input_tables.len(),
                input_names.len()
            ),
        ));
    }
    let inputs = input_tables.iter().map(inputs::load_input).collect::<Result<Vec<_>>>()?;
    Ok(BodySpec { file: file.to_path_buf(), kernel, output_names, call, inputs, timeout })
}

/// An output is written to `<out>/<name>.npy`, so its name must be a plain file name: not empty,
/// not `.` or `..`, without path separators or NUL.
pub fn check_output_name(name: &str) -> std::result::Result<(), String> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if plain {
        Ok(())
    } else {
        Err(format!("output name {name:?} is not a plain file name (it names the file <out>/<name>.npy)"))
    }
}

fn parse_template_item(c: &Section<'_>, i: usize, item: &Value) -> Result<(TemplateName, TemplateArg)> {
    let key = format!("template[{i}]");
    let pair = match item {
        Value::Array(p) if p.len() == 2 => p,
        _ => return Err(c.err(&key, "expected a [name, value] pair")),
    };
    let name = match &pair[0] {
        Value::String(s) => TemplateName::Owned(s.clone()),
        v => return Err(c.err(&key, format!("template name must be a string, found {}", v.type_str()))),
    };
    let arg = match &pair[1] {
        Value::Boolean(b) => TemplateArg::Bool(*b),
        Value::Integer(n) => TemplateArg::Int(
            i32::try_from(*n).map_err(|_| c.err(&key, format!("template integer {n} does not fit in 32 bits")))?,
        ),
        Value::String(s) => {
            TemplateArg::DType(kiln::DType::from_name(s).ok_or_else(|| c.err(&key, toml_access::unknown_dtype(s)))?)
        }
        v => {
            return Err(c.err(
                &key,
                format!(
                    "invalid template argument of type {}; must be a dtype name, an integer or a boolean",
                    v.type_str()
                ),
            ))
        }
    };
    Ok((name, arg))
}

fn parse_library(root: &Section<'_>) -> Result<LibrarySpec> {
    let file = root.file;
    let l = root.sub_table("library")?.ok_or_else(|| root.err("library", "missing [library] table"))?;
    l.only_keys(&["source_file", "source", "function", "constants", "math_mode", "include_dirs", "defines"])?;
    // A source file's quoted `#include`s are looked up beside it, as a compiler does.
    let (source, source_dir) = match (l.str("source_file")?, l.str("source")?) {
        (Some(rel), None) => {
            let path = file.parent().map(|d| d.join(rel)).unwrap_or_else(|| rel.into());
            kiln::array::npy::check_regular_file(&path)
                .map_err(|msg| l.err("source_file", format!("{}: {msg}", path.display())))?;
            let text =
                std::fs::read_to_string(&path).map_err(|e| l.err("source_file", format!("{}: {e}", path.display())))?;
            (text, path.parent().map(Path::to_path_buf))
        }
        (None, Some(text)) => (text.to_string(), None),
        (Some(_), Some(_)) => return Err(l.err("source", "give either source or source_file, not both")),
        (None, None) => return Err(l.err("source_file", "missing: give source_file or source")),
    };
    let function = l.req_str("function")?;
    let name = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut library = MetalLibrary::new(name, source);
    if let Some(dir) = source_dir {
        library = library.file_dir(dir);
    }
    // Include directories are relative to the spec file.
    if l.has("include_dirs") {
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        library = library.include_dirs(l.strings("include_dirs")?.iter().map(|d| base.join(d)));
    }
    // Macros the library's build defines (`-D name=value`): strings, integers, floats or bools.
    if let Some(defines) = l.sub_table("defines")? {
        let mut macros = Vec::new();
        for (name, value) in defines.table {
            let text = match value {
                toml::Value::String(s) if !s.contains('\n') => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => format!("{f:?}"),
                toml::Value::Boolean(b) => u8::from(*b).to_string(),
                _ => return Err(defines.err(name, "a macro's value is one line of text, a number or a bool")),
            };
            let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !identifier {
                return Err(defines.err(name, "a macro's name is an identifier"));
            }
            macros.push((name.clone(), text));
        }
        library = library.defines(macros);
    }
    if let Some(m) = l.str("math_mode")? {
        library = library.math_mode(m.parse::<MathMode>().map_err(|e| l.err("math_mode", e.to_string()))?);
    }

    let d = root.sub_table("dispatch")?.ok_or_else(|| root.err("dispatch", "missing [dispatch] table"))?;
    d.only_keys(&["threadgroups", "grid", "threadgroup", "threadgroup_memory", "timeout"])?;
    let dispatch = match (d.has("threadgroups"), d.has("grid")) {
        (true, false) => Dispatch::Threadgroups(d.dims3("threadgroups")?),
        (false, true) => Dispatch::Threads(d.dims3("grid")?),
        _ => return Err(d.err("threadgroups", "give exactly one of threadgroups (group count) or grid (thread count)")),
    };
    let mut launch = LibraryLaunch::new(function, dispatch, d.dims3("threadgroup")?);
    let timeout = d.seconds("timeout")?;
    if d.has("threadgroup_memory") {
        launch.threadgroup_memory = d.usizes("threadgroup_memory")?;
    }
    if let Some(consts) = l.sub_table("constants")? {
        for (key, value) in consts.table {
            let ckey = match key.parse::<u32>() {
                Ok(i) => ConstantKey::Index(i),
                Err(_) => ConstantKey::Name(key.clone()),
            };
            let cval = match value {
                Value::Boolean(b) => ConstantValue::Bool(*b),
                Value::Integer(n) => ConstantValue::Int(*n),
                Value::Float(f) => ConstantValue::Float(*f),
                v => return Err(consts.err(key, format!("expected a boolean or a number, found {}", v.type_str()))),
            };
            launch.constants.push((ckey, cval));
        }
    }

    let mut buffers: Vec<(Option<String>, LibraryArg)> = Vec::new();
    for b in root.tables("buffer")? {
        let buffer = parse_buffer(&b)?;
        if let Some(out) = &buffer.0 {
            check_output_name(out).map_err(|msg| b.err("output", msg))?;
            if let Some(first) = buffers.iter().position(|(n, _)| n.as_deref() == Some(out.as_str())) {
                return Err(b.err(
                    "output",
                    format!("output name {out:?} is already used by buffer[{first}]; output names must be unique (each is written to <out>/<name>.npy)"),
                ));
            }
        }
        buffers.push(buffer);
    }
    Ok(LibrarySpec { file: file.to_path_buf(), library, launch, buffers, timeout })
}

fn parse_buffer(b: &Section<'_>) -> Result<(Option<String>, LibraryArg)> {
    if b.has("output") && b.has("file") {
        // An in/out buffer is written back whole, so a view of the file has no place to go.
        for key in ["slice", "transpose", "broadcast_to"] {
            if b.has(key) {
                return Err(b.err(
                    key,
                    "an in/out buffer (file with output) is loaded and written back whole; slice, transpose and \
                     broadcast_to are refused (save the view you want as its own .npy file)",
                ));
            }
        }
        b.only_keys(&["file", "output", "dtype"])?;
        let name = b.req_str("output")?.to_string();
        return Ok((Some(name), LibraryArg::InOut(inputs::load_view(b)?)));
    }
    if b.has("output") {
        b.only_keys(&["output", "shape", "dtype", "init_value"])?;
        let name = b.req_str("output")?.to_string();
        let shape = inputs::shape_at(b, "shape")?;
        let dtype = b.dtype("dtype")?.ok_or_else(|| b.err("dtype", "missing required key"))?;
        let init_value = b.number("init_value")?;
        return Ok((Some(name), LibraryArg::Output { shape, dtype, init_value }));
    }
    if b.has("values") {
        b.only_keys(&["values", "dtype"])?;
        let a = inputs::load_values(b)?;
        return Ok((None, LibraryArg::Bytes(a.to_contiguous_bytes()?)));
    }
    if b.has("fields") {
        b.only_keys(&["fields"])?;
        return Ok((None, LibraryArg::Bytes(inputs::pack_fields(b)?)));
    }
    if b.has("file") {
        b.only_keys(&inputs::VIEW_KEYS)?;
        return Ok((None, LibraryArg::Array(inputs::load_view(b)?)));
    }
    Err(b.err("", "a [[buffer]] needs one of: file, output, values, fields"))
}
