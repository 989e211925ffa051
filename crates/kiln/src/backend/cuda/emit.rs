//! The CUDA translation unit: the self-contained CUDA prelude, the lowered user code (inside
//! the prelude's `namespace kiln_metal`, with `#line` directives pointing at the user's own
//! lines) and, in `namespace kiln_user`, one
//! `extern "C" __global__` wrapper per entry point.
//!
//! Launch ABI: every wrapper takes one `const __grid_constant__ KilnArgs` by value. It carries
//! the region being launched (group origin, the region's actual group size), the Metal grid and
//! uniform threadgroup size, one 64-bit word per buffer slot (a device address, or for small
//! constant data an offset into the inline byte area of the same block) and the offsets of the
//! dynamic `[[threadgroup(n)]]` buffers inside dynamic shared memory. The wrapper derives every
//! Metal builtin from `blockIdx`/`threadIdx` and that block. The inline byte area is sized per
//! unit (`KilnArgsT<N>`): 1024 bytes for full-file kernels, and for body kernels only what their
//! `constant` slots can hold: on the H100 a 94 µs kernel timed 0.3-0.5 µs longer with a
//! 1376-byte parameter block than with a few pointers.
//!
//! Body-only (MLX) kernels bind fresh outputs and read-only inputs, so their wrapper passes the
//! buffer slots through a forced-inline function whose read-only (`const device`, `constant`)
//! pointers are `__restrict__`: the read-only data can then be loaded through the non-coherent
//! cache and is not reloaded after stores. Their `device` slots always hold device
//! allocations, so those skip the inline-data test and stay known global (`ld.global`).
//! Full-file kernels bind user buffers that may alias each other and may bind small data to a
//! `device` parameter, so their slots keep the plain, generic form.

use std::fmt::Write;

use crate::source::lower::{AddressSpace, Entry, EntryParam, LoweredModule};
use crate::source::prelude::{headers, CUDA_CONFIG, CUDA_RUNTIME, MLX_UTILS};

/// Dynamic threadgroup buffers a kernel may bind.
pub const MAX_THREADGROUP_BUFFERS: usize = 8;
/// Most bytes of small constant data carried inline in the parameter block (full-file kernels
/// get all of them; body kernels only what their constant slots can hold, see
/// [`inline_capacity`]).
pub const INLINE_BYTES: usize = 1024;
/// Inline bytes a body kernel reserves per `constant` slot: a reference (a scalar, `ndim`) takes
/// at most 8 bytes padded to 16; a pointer (`_shape`, `_strides` of at most 10 axes) at most 80.
const INLINE_PER_REFERENCE: usize = 16;
const INLINE_PER_POINTER: usize = 80;

/// Byte offsets of the `KilnArgs` fields (kept in step with `ARGS_STRUCT`).
pub mod args_layout {
    /// Offset of `origin`.
    pub const ORIGIN: usize = 0;
    /// Offset of `region`.
    pub const REGION: usize = 12;
    /// Offset of `grid`.
    pub const GRID: usize = 24;
    /// Offset of `threadgroup`.
    pub const THREADGROUP: usize = 36;
    /// Offset of `groups`.
    pub const GROUPS: usize = 48;
    /// Offset of `inline_mask`.
    pub const INLINE_MASK: usize = 60;
    /// Offset of `tg_offset`.
    pub const TG_OFFSETS: usize = 64;
    /// Offset of `slot`.
    pub const SLOTS: usize = 96;
    /// Offset of the inline data area (`bytes`).
    pub const INLINE: usize = 352;
    /// The largest block (the host side always fills one this size; the driver copies the
    /// entry's own, possibly shorter, parameter).
    pub const SIZE: usize = INLINE + super::INLINE_BYTES;
}

/// The C declaration matching [`args_layout`].
const ARGS_STRUCT: &str = r#"
template <unsigned INLINE>
struct KilnArgsT {
  unsigned origin[3];
  unsigned region[3];
  unsigned grid[3];
  unsigned threadgroup[3];
  unsigned groups[3];
  unsigned inline_mask;
  unsigned tg_offset[8];
  unsigned long long slot[31];
  unsigned long long pad_;
  alignas(16) unsigned char bytes[INLINE];
};
static_assert(sizeof(KilnArgsT<1024>) == 1376, "KilnArgs layout");
static_assert(sizeof(KilnArgsT<16>) == 368, "KilnArgs layout");

namespace kiln {
template <unsigned N>
__device__ __forceinline__ void* slot(const KilnArgsT<N>& a, unsigned i) {
  if (a.inline_mask & (1u << i)) return (void*)(a.bytes + a.slot[i]);
  return (void*)a.slot[i];
}
// A slot that holds a device allocation (never inline data): the integer-to-pointer
// conversion lets the compiler use global-space loads and stores.
template <unsigned N>
__device__ __forceinline__ void* global_slot(const KilnArgsT<N>& a, unsigned i) {
  return (void*)a.slot[i];
}
struct ptr_proxy {
  void* p;
  template <class T> __device__ operator T*() const { return static_cast<T*>(p); }
};
struct ref_proxy {
  void* p;
  template <class T> __device__ operator T&() const { return *static_cast<T*>(p); }
};
// The parameter types of an entry (`signature<decltype(f)>::param<I>`), so its wrapper can cast
// slots in place: a pointer that goes through a helper call loses `__restrict__` in NVVM.
template <unsigned I, class H, class... P> struct nth_param { using type = typename nth_param<I - 1, P...>::type; };
template <class H, class... P> struct nth_param<0, H, P...> { using type = H; };
template <class F> struct signature;
template <class... P> struct signature<void(P...)> {
  template <unsigned I> using param = typename nth_param<I, P...>::type;
};
template <class R> struct unref { using type = R; };
template <class R> struct unref<R&> { using type = R; };
}  // namespace kiln
"#;

/// Generated text of one CUDA translation unit.
#[derive(Clone, Debug)]
pub struct CudaUnit {
    /// The CUDA C++ source text.
    pub source: String,
    /// Bytes of the inline data area of this unit's `KilnArgs`: constant bindings beyond it go
    /// to a device buffer.
    pub inline_bytes: usize,
    /// For each line of `source` (0-based index), the user's line it came from (0: generated).
    pub line_map: Vec<u32>,
}

/// The C symbol of the wrapper for `host_name` (identifier characters kept, others escaped).
pub fn entry_symbol(host_name: &str) -> String {
    let mut s = String::from("kiln_entry_");
    for c in host_name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            s.push(c);
        } else {
            let _ = write!(s, "_x{:x}_", c as u32);
        }
    }
    s
}

/// The prelude text (everything before user code).
///
/// Everything lives in `namespace kiln_metal`: NVRTC predeclares CUDA's own `float4`, `uint3`,
/// ... at global scope, and Metal's vector types of the same names must not collide with them.
pub fn prelude() -> String {
    shared_prelude().to_string()
}

/// [`prelude`], built once: the same text starts every unit [`emit`] writes, which NVRTC may
/// take from a precompiled header.
pub fn shared_prelude() -> &'static str {
    static PRELUDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PRELUDE.get_or_init(build_prelude)
}

fn build_prelude() -> String {
    let mut out = String::from("namespace kiln_metal {\n");
    for (name, text) in headers(CUDA_CONFIG, &CUDA_RUNTIME) {
        let _ = writeln!(out, "// ---- kiln prelude: {name}");
        out.push_str(&requalify(text));
        out.push('\n');
    }
    out.push_str(ARGS_STRUCT);
    out.push_str("}  // namespace kiln_metal\n");
    out
}

/// Rewrites global qualifications (`::metal`, `::kiln`) of the shared headers to the wrapping
/// namespace.
fn requalify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let prev_ident =
            i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if !prev_ident && (rest.starts_with("::metal") || rest.starts_with("::kiln")) {
            out.push_str("::kiln_metal");
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Emits the full translation unit for a lowered module; `mlx_body` marks a body-only kernel:
/// it adds MLX's utils preamble, which such kernels are compiled after; with
/// `restrict_pointers` the wrapper also relies on MLX's binding contract (see the module
/// header), else it keeps generic pointers.
pub fn emit(module: &LoweredModule, kernel: &str, mlx_body: bool, restrict_pointers: bool) -> CudaUnit {
    let inline_bytes = inline_capacity(module, mlx_body);
    let mut out = shared_prelude().to_string();
    let _ = writeln!(out, "\nnamespace kiln_metal {{\nusing KilnArgs = KilnArgsT<{inline_bytes}>;");
    let mut line_map = emit_user_code(&mut out, module, kernel, mlx_body);
    let _ = writeln!(out, "#line {} \"kiln-entries\"", 1);
    line_map.push(0);
    // Kernels that log keep their Metal group position where `kiln::oslog::print` reads it.
    let logs = module.code.contains("kiln::oslog::print");
    for entry in &module.entries {
        let text = if mlx_body && restrict_pointers { restrict_wrapper(entry) } else { wrapper(entry) };
        out.push_str(&if logs { text.replace(BUILTIN_LOCALS, &log_group_locals()) } else { text });
    }
    out.push_str("}  // namespace kiln_user\n}  // namespace kiln_metal\n");
    line_map.resize(out.lines().count(), 0);
    CudaUnit { source: out, inline_bytes, line_map }
}

/// Writes the user's lowered code into `out` (inside `kiln_metal`, after the prelude), with
/// `#line` directives at the user's lines, then opens `namespace kiln_user` for the entry
/// wrappers; `mlx_body` adds MLX's utils preamble first. Returns, for each line of `out`, the
/// user's line it came from.
///
/// The code stands at the prelude's own scope, as it stands at global scope on the host: its
/// `namespace metal { ... }` reopens Metal's (MLX's headers add overloads and traits there),
/// its specialisations of the prelude's templates (`_numeric_limits_impl<T>`) are in their
/// namespace, and its overloads of Metal's names join Metal's.
pub(crate) fn emit_user_code(out: &mut String, module: &LoweredModule, kernel: &str, mlx_body: bool) -> Vec<u32> {
    out.push_str("using namespace metal;\n");
    if mlx_body {
        out.push_str("// ---- kiln prelude: common/mlx_utils.h\n");
        out.push_str(&requalify(MLX_UTILS.1));
        out.push('\n');
    }
    let mut line_map = vec![0u32; out.lines().count()];
    let file = kernel.replace(['"', '\\'], "_");
    let mut expected: Option<u32> = None;
    let mut continued = false;
    for (i, line) in module.code.lines().enumerate() {
        let user = module.line_map.get(i).copied().unwrap_or(0);
        if !continued && expected != Some(user) {
            if user > 0 {
                let _ = writeln!(out, "#line {user} \"{file}\"");
            } else {
                let _ = writeln!(out, "#line {} \"kiln-generated\"", i + 1);
            }
            line_map.push(0);
        }
        out.push_str(line);
        out.push('\n');
        line_map.push(user);
        expected = if user > 0 { Some(user + 1) } else { None };
        continued = line.ends_with('\\');
    }
    out.push_str("namespace kiln_user {\n");
    line_map.push(0);
    line_map
}

/// The inline data area a unit's `KilnArgs` carries. A body kernel binds inline only its
/// scalars and its inputs' `_shape`/`_strides`/`_ndim`, all in `constant` slots, so it reserves
/// what those can hold (a shorter parameter block is a cheaper launch); a full-file kernel may
/// bind any small data and gets the whole area.
pub fn inline_capacity(module: &LoweredModule, mlx_body: bool) -> usize {
    if !mlx_body {
        return INLINE_BYTES;
    }
    let mut bytes = 0;
    for entry in &module.entries {
        let mut need = 0;
        for p in &entry.params {
            if let EntryParam::Buffer { space: AddressSpace::Constant, by_ref, .. } = p {
                need += if *by_ref { INLINE_PER_REFERENCE } else { INLINE_PER_POINTER };
            }
        }
        bytes = bytes.max(need);
    }
    bytes.clamp(16, INLINE_BYTES)
}

/// The `extern "C" __global__` wrapper of one entry.
fn wrapper(entry: &Entry) -> String {
    let mut args = Vec::new();
    for p in &entry.params {
        args.push(match p {
            // Pointer proxies convert to whatever the callee's parameter is, so template
            // instantiations (`device const T*` with T bound by `[[host_name]]`) need no names.
            EntryParam::Buffer { index, by_ref, .. } => {
                if *by_ref {
                    format!("kiln::ref_proxy{{kiln::slot(a, {index})}}")
                } else {
                    format!("kiln::ptr_proxy{{kiln::slot(a, {index})}}")
                }
            }
            EntryParam::Threadgroup { index, .. } => {
                format!("kiln::ptr_proxy{{kiln_dyn_smem + a.tg_offset[{index}]}}")
            }
            EntryParam::Builtin { attribute, ty, .. } => builtin_value(attribute, ty),
        });
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void {}(const __grid_constant__ KilnArgs a) {{",
        entry_symbol(&entry.host_name)
    );
    s.push_str("  extern __shared__ __align__(16) unsigned char kiln_dyn_smem[];\n");
    s.push_str("  (void)kiln_dyn_smem;\n");
    s.push_str(BUILTIN_LOCALS);
    let _ = writeln!(s, "  {}(\n    {});", entry.callee, args.join(",\n    "));
    s.push_str("}\n");
    s
}

/// The wrapper of a body-only kernel (MLX's contract: outputs are fresh allocations, inputs are
/// read-only): read-only slots reach the body through `__restrict__` parameters of a
/// forced-inline function, `device` slots through `global_slot`; each is cast to the entry's
/// parameter type right in the call.
fn restrict_wrapper(entry: &Entry) -> String {
    let symbol = entry_symbol(&entry.host_name);
    let mut params = vec!["const KilnArgs& a".to_string(), "unsigned char* kiln_dyn_smem".to_string()];
    let mut values = vec!["a".to_string(), "kiln_dyn_smem".to_string()];
    let mut args = Vec::new();
    for (position, p) in entry.params.iter().enumerate() {
        args.push(match p {
            EntryParam::Buffer { index, by_ref, space, is_const, .. } => {
                let name = format!("kiln_b{index}");
                let qualifier = if *is_const { "const void* __restrict__" } else { "void*" };
                params.push(format!("{qualifier} {name}"));
                values.push(if *space == AddressSpace::Device {
                    format!("kiln::global_slot(a, {index})")
                } else {
                    format!("kiln::slot(a, {index})")
                });
                let ty = format!("kiln_sig::param<{position}>");
                if *by_ref {
                    format!("*static_cast<kiln::unref<{ty}>::type*>({name})")
                } else {
                    format!("static_cast<{ty}>({name})")
                }
            }
            EntryParam::Threadgroup { index, .. } => {
                format!("kiln::ptr_proxy{{kiln_dyn_smem + a.tg_offset[{index}]}}")
            }
            EntryParam::Builtin { attribute, ty, .. } => builtin_value(attribute, ty),
        });
    }
    let mut s = String::new();
    let _ = writeln!(s, "__device__ __forceinline__ void {symbol}_body(\n    {}) {{", params.join(",\n    "));
    s.push_str(BUILTIN_LOCALS);
    let _ = writeln!(s, "  using kiln_sig = kiln::signature<decltype({})>;", entry.callee);
    let _ = writeln!(s, "  {}(\n    {});", entry.callee, args.join(",\n    "));
    s.push_str("}\n");
    let _ = writeln!(s, "extern \"C\" __global__ void {symbol}(const __grid_constant__ KilnArgs a) {{");
    s.push_str("  extern __shared__ __align__(16) unsigned char kiln_dyn_smem[];\n");
    let _ = writeln!(s, "  {symbol}_body(\n    {});", values.join(",\n    "));
    s.push_str("}\n");
    s
}

/// Locals every wrapper computes: `g*` group position, `t*` position in group, `n*` the actual
/// group size, `u*` the uniform group size, `lin` the linear index within the group.
const BUILTIN_LOCALS: &str = r#"  const unsigned gx = a.origin[0] + blockIdx.x, gy = a.origin[1] + blockIdx.y, gz = a.origin[2] + blockIdx.z;
  const unsigned tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const unsigned nx = blockDim.x, ny = blockDim.y, nz = blockDim.z;
  const unsigned ux = a.threadgroup[0], uy = a.threadgroup[1], uz = a.threadgroup[2];
  const unsigned lin = tx + nx * (ty + ny * tz);
  const unsigned ntg = nx * ny * nz;
  (void)gx; (void)gy; (void)gz; (void)tx; (void)ty; (void)tz; (void)ux; (void)uy; (void)uz;
  (void)lin; (void)ntg;
"#;

fn log_group_locals() -> String {
    format!("{BUILTIN_LOCALS}  kiln::oslog::set_group(gx, gy, gz);\n")
}

/// The expression for a Metal builtin of declared type `ty`, in a wrapper that computes
/// `BUILTIN_LOCALS` from its `KilnArgs a`.
fn builtin_value(attribute: &str, ty: &str) -> String {
    builtin_value_in(
        attribute,
        ty,
        ["a.grid[0]", "a.grid[1]", "a.grid[2]"],
        ["a.groups[0]", "a.groups[1]", "a.groups[2]"],
    )
}

/// The expression for a Metal builtin of declared type `ty` in code that defines the locals of
/// `BUILTIN_LOCALS` (`g*`, `t*`, `n*`, `u*`, `lin`, `ntg`), with the grid's threads and groups
/// per dimension given by `grid` and `groups`.
pub(crate) fn builtin_value_in(attribute: &str, ty: &str, grid: [&str; 3], groups: [&str; 3]) -> String {
    let xyz = |x: &str, y: &str, z: &str| vector_of(ty, [x, y, z]);
    match attribute {
        "thread_position_in_grid" => xyz("gx * ux + tx", "gy * uy + ty", "gz * uz + tz"),
        "thread_position_in_threadgroup" => xyz("tx", "ty", "tz"),
        "threadgroup_position_in_grid" => xyz("gx", "gy", "gz"),
        "threads_per_threadgroup" => xyz("nx", "ny", "nz"),
        "dispatch_threads_per_threadgroup" => xyz("ux", "uy", "uz"),
        "threads_per_grid" | "grid_size" => xyz(grid[0], grid[1], grid[2]),
        "threadgroups_per_grid" => xyz(groups[0], groups[1], groups[2]),
        "grid_origin" => xyz("0u", "0u", "0u"),
        "thread_index_in_threadgroup" => scalar_of(ty, "lin"),
        "thread_index_in_simdgroup" => scalar_of(ty, "(lin & 31u)"),
        "simdgroup_index_in_threadgroup" => scalar_of(ty, "(lin >> 5)"),
        "threads_per_simdgroup" | "thread_execution_width" => scalar_of(ty, "32u"),
        "simdgroups_per_threadgroup" => scalar_of(ty, "((ntg + 31u) >> 5)"),
        "dispatch_simdgroups_per_threadgroup" => scalar_of(ty, "((ux * uy * uz + 31u) >> 5)"),
        "thread_index_in_quadgroup" => scalar_of(ty, "(lin & 3u)"),
        "quadgroup_index_in_threadgroup" => scalar_of(ty, "(lin >> 2)"),
        "quadgroups_per_threadgroup" => scalar_of(ty, "((ntg + 3u) >> 2)"),
        "dispatch_quadgroups_per_threadgroup" => scalar_of(ty, "((ux * uy * uz + 3u) >> 2)"),
        // Unknown builtins surface as a compile error naming the attribute.
        other => format!("kiln_unsupported_builtin_{other}"),
    }
}

/// Number of components of a Metal scalar or vector type name (`uint` 1, `ushort3` 3,
/// `vec<uint, 2>` 2).
fn components(ty: &str) -> usize {
    let t = ty.trim();
    if let Some(inner) = t.strip_suffix('>') {
        return inner.rsplit(',').next().and_then(|n| n.trim().parse().ok()).unwrap_or(1);
    }
    match t.chars().last().and_then(|c| c.to_digit(10)) {
        Some(n @ 2..=4) => n as usize,
        _ => 1,
    }
}

fn vector_of(ty: &str, parts: [&str; 3]) -> String {
    let n = components(ty);
    if n == 1 {
        return scalar_of(ty, parts[0]);
    }
    let elem = element_type(ty);
    let comps: Vec<String> = parts[..n.min(3)].iter().map(|p| format!("static_cast<{elem}>({p})")).collect();
    format!("{ty}({})", comps.join(", "))
}

fn scalar_of(ty: &str, value: &str) -> String {
    format!("static_cast<{ty}>({value})")
}

fn element_type(ty: &str) -> String {
    let t = ty.trim();
    if let Some(rest) = t.strip_prefix("vec<") {
        return rest.split(',').next().unwrap_or("uint").trim().to_string();
    }
    t.trim_end_matches(|c: char| c.is_ascii_digit()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_of_metal_types() {
        assert_eq!(components("uint"), 1);
        assert_eq!(components("uint3"), 3);
        assert_eq!(components("ushort2"), 2);
        assert_eq!(components("vec<uint, 2>"), 2);
        assert_eq!(element_type("ushort3"), "ushort");
        assert_eq!(element_type("vec<uint, 2>"), "uint");
    }

    #[test]
    fn entry_symbols_are_identifiers() {
        assert_eq!(entry_symbol("gemm_f32"), "kiln_entry_gemm_f32");
        assert_eq!(entry_symbol("a.b"), "kiln_entry_a_x2e_b");
    }

    fn buffer(index: u32, space: AddressSpace, by_ref: bool) -> EntryParam {
        EntryParam::Buffer { name: format!("b{index}"), index, pointee: "float".into(), space, is_const: true, by_ref }
    }

    #[test]
    fn body_kernels_reserve_inline_bytes_for_their_constant_slots() {
        let params = vec![
            buffer(0, AddressSpace::Device, false),
            buffer(1, AddressSpace::Constant, false),
            buffer(2, AddressSpace::Constant, true),
            buffer(3, AddressSpace::Device, false),
        ];
        let entry = Entry { host_name: "k".into(), callee: "k".into(), params };
        let module = LoweredModule {
            code: String::new(),
            entries: vec![entry],
            needs_cooperative_threads: false,
            coroutines: false,
            regions: Vec::new(),
            line_map: Vec::new(),
        };
        assert_eq!(inline_capacity(&module, true), INLINE_PER_POINTER + INLINE_PER_REFERENCE);
        assert_eq!(inline_capacity(&module, false), INLINE_BYTES);
        let unit = emit(&module, "k", true, true);
        assert_eq!(unit.inline_bytes, 96);
        assert!(unit.source.contains("using KilnArgs = KilnArgsT<96>;"));
        let empty = LoweredModule { entries: Vec::new(), ..module };
        assert_eq!(inline_capacity(&empty, true), 16);
    }

    #[test]
    fn builtins_narrow_to_declared_type() {
        assert_eq!(builtin_value("thread_index_in_simdgroup", "ushort"), "static_cast<ushort>((lin & 31u))");
        assert!(builtin_value("thread_position_in_grid", "uint2").starts_with("uint2(static_cast<uint>"));
    }
}
