//! MSL constructs the lowering must carry over unchanged, each in a small kernel written the way
//! real MLX kernels write it, run on every backend against a plain-Rust reference: conditionals
//! with mixed half/float arms, `threadgroup` arrays sized by expressions, `rgba` swizzles and
//! struct members named like swizzles, and the C++ idioms of MLX's headers. Every case is also
//! lowered to CUDA and compiled by NVRTC (skipped when NVRTC is missing, unless
//! `KILN_REQUIRE_BACKEND=nvrtc`).

mod common;

use common::{assert_close, random_array, Rng};
use half::f16;
use kiln::backend::{Dispatch, MetalProgram};
use kiln::{Array, DType, Device, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};

/// How a case runs: an `mx.fast.metal_kernel` body, or a full file with one function.
enum Program {
    Body { kernel: MetalKernel, inputs: Vec<KernelInput>, spec: Box<LaunchSpec> },
    File { library: MetalLibrary, args: Vec<LibraryArg>, launch: LibraryLaunch },
}

/// A kernel with its inputs and, per output, the reference values and the dtype whose
/// tolerance applies.
struct Case {
    name: &'static str,
    program: Program,
    want: Vec<(Vec<f64>, DType)>,
}

fn values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

fn round_f16(v: f64) -> f64 {
    f16::from_f64(v).to_f64()
}

fn run_case(device: Device, case: Case) {
    let outputs = match case.program {
        Program::Body { kernel, inputs, spec } => {
            let inputs: Vec<KernelInput> = inputs
                .into_iter()
                .map(|i| match i {
                    KernelInput::Array(a) => KernelInput::Array(a.to_device(device).unwrap()),
                    scalar => scalar,
                })
                .collect();
            kernel.call(&inputs, &spec.device(device)).unwrap()
        }
        Program::File { library, args, launch } => {
            let args: Vec<LibraryArg> = args
                .into_iter()
                .map(|a| match a {
                    LibraryArg::Array(a) => LibraryArg::Array(a.to_device(device).unwrap()),
                    other => other,
                })
                .collect();
            library.dispatch(device, &args, &launch).unwrap()
        }
    };
    assert_eq!(outputs.len(), case.want.len(), "{}: output count", case.name);
    for (i, (out, (want, dtype))) in outputs.iter().zip(&case.want).enumerate() {
        assert_close(&format!("{} output {i}", case.name), out, want, *dtype);
    }
}

fn program_of(case: &Case) -> MetalProgram {
    match &case.program {
        Program::Body { kernel, inputs, spec } => {
            let arrays: Vec<Array> = inputs.iter().map(KernelInput::to_array).collect();
            kernel.program(&kernel.generate(&arrays, spec).unwrap())
        }
        Program::File { library, launch, .. } => library.program(launch),
    }
}

// ---- conditionals with mixed half/float arms ----------------------------------------------

const N: usize = 96;

/// `?:` whose arms differ in type with half or bfloat on one side: Metal's usual arithmetic
/// conversions (float beats half, half beats int, half with bfloat is float), nested
/// conditionals, a conditional used as an lvalue, one with `void` arms, ones in constant
/// expressions (an array size) and one choosing between pointers.
fn mixed_conditionals() -> Case {
    let mut rng = Rng::new(101);
    let x = random_array(&mut rng, DType::F16, &[N]);
    let f = random_array(&mut rng, DType::F32, &[N]);
    let b = random_array(&mut rng, DType::BF16, &[N]);
    let scale = 0.75f64;
    let src = r#"
        uint i = thread_position_in_grid.x;
        T h = x[i];
        float v = f[i];
        int n = int(i) - 40;
        o_float[i] = flag ? v * scale : h;
        o_relu[i] = h > T(0) ? h : 0;
        o_int[i] = (i & 1) ? n : h;
        o_bf[i] = (i % 3 == 0) ? h : b[i];
        o_nested[i] = v > 0 ? h
                    : v < -1 ? v : n;
        float a = 0.0f, c = 0.0f;
        (v > 0 ? a : c) = v;
        int hits = 0;
        v > 0.5f ? (void)(hits += 2) : (void)(hits += 1);
        constexpr int kM = 3;
        constexpr int kSel = kM > 2 ? kM : 2;
        thread float buf[kSel > 2 ? kSel : 2];
        const device float* src = (i & 2) ? &f[0] : &f[1];
        buf[kSel - 1] = *src;
        o_lvalue[i] = a - c + hits + buf[2];
    "#;
    let outs = ["o_float", "o_relu", "o_int", "o_bf", "o_nested", "o_lvalue"];
    let kernel = MetalKernel::new("mixed_conditionals", &["flag", "scale", "x", "f", "b"], &outs, src).unwrap();
    let mut spec = LaunchSpec::new([N as u32, 1, 1], [32, 1, 1]).template("T", DType::F16);
    for dtype in [DType::F32, DType::F16, DType::F16, DType::F32, DType::F32, DType::F32] {
        spec = spec.output(&[N], dtype);
    }
    let (xv, fv, bv) = (values(&x), values(&f), values(&b));
    let mut want = vec![Vec::new(); 6];
    for i in 0..N {
        let (h, v, n) = (xv[i], fv[i], i as f64 - 40.0);
        want[0].push((v as f32 * scale as f32) as f64);
        want[1].push(if h > 0.0 { h } else { 0.0 });
        want[2].push(if i & 1 == 1 { round_f16(n) } else { h });
        want[3].push(if i % 3 == 0 { h } else { bv[i] });
        want[4].push(if v > 0.0 {
            h
        } else if v < -1.0 {
            v
        } else {
            n
        });
        let picked = if i & 2 != 0 { fv[0] } else { fv[1] };
        want[5].push(v.abs() + if v > 0.5 { 2.0 } else { 1.0 } + picked);
    }
    let dtypes = [DType::F32, DType::F16, DType::F16, DType::F32, DType::F32, DType::F32];
    Case {
        name: "mixed_conditionals",
        program: Program::Body {
            kernel,
            inputs: vec![true.into(), scale.into(), x.into(), f.into(), b.into()],
            spec: Box::new(spec),
        },
        want: want.into_iter().zip(dtypes).collect(),
    }
}

fn conditionals_with_mixed_half_float_arms(device: Device) {
    run_case(device, mixed_conditionals());
}

backend_tests!(conditionals_with_mixed_half_float_arms);

// ---- threadgroup arrays sized by expressions ------------------------------------------------

/// Threadgroup arrays whose sizes are expressions of template constants (`[BM][BK + 1]`,
/// `[BM * BK]`, `[(BM > 2 ? BM : 2) * BK]`) exchange data between threads: each thread reads
/// what another thread of its group wrote.
fn expression_sized_threadgroup_arrays() -> Case {
    const BM: usize = 4;
    const BK: usize = 3;
    const GROUPS: usize = 5;
    let mut rng = Rng::new(102);
    let x = random_array(&mut rng, DType::F32, &[GROUPS * BM * BK]);
    let src = r#"
        uint lid = thread_position_in_threadgroup.x;
        uint base = threadgroup_position_in_grid.x * (BM * BK);
        threadgroup T tile[BM][BK + 1];
        threadgroup float flat[BM * BK], spare[(BM > 2 ? BM : 2) * BK];
        tile[lid / BK][lid % BK] = x[base + lid];
        flat[lid] = 2.0f * x[base + lid];
        spare[lid] = float(lid);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint other = BM * BK - 1 - lid;
        out[base + lid] = tile[other / BK][other % BK] + flat[(lid + 1) % (BM * BK)] + spare[other];
    "#;
    let kernel = MetalKernel::new("tg_expr", &["x"], &["out"], src).unwrap();
    let n = GROUPS * BM * BK;
    let spec = LaunchSpec::new([n as u32, 1, 1], [(BM * BK) as u32, 1, 1])
        .template("T", DType::F32)
        .template("BM", BM as i32)
        .template("BK", BK as i32)
        .output(&[n], DType::F32);
    let xv = values(&x);
    let g = BM * BK;
    let want = (0..n)
        .map(|i| {
            let (base, lid) = (i / g * g, i % g);
            let other = g - 1 - lid;
            xv[base + other] + 2.0 * xv[base + (lid + 1) % g] + other as f64
        })
        .collect();
    Case {
        name: "tg_expr",
        program: Program::Body { kernel, inputs: vec![x.into()], spec: Box::new(spec) },
        want: vec![(want, DType::F32)],
    }
}

fn threadgroup_arrays_sized_by_expressions_are_shared(device: Device) {
    run_case(device, expression_sized_threadgroup_arrays());
}

backend_tests!(threadgroup_arrays_sized_by_expressions_are_shared);

// ---- swizzles ------------------------------------------------------------------------------

/// `rgba` swizzles read and written (one to four letters, compound assignment, an overlapping
/// `u.gr = u.rg`), beside a user struct whose members are named `xy`, `rgb`, `a` and `b` and
/// are used both inside its member functions and from the kernel.
fn swizzles_and_struct_members() -> Case {
    const N4: usize = 40;
    let mut rng = Rng::new(103);
    let x = random_array(&mut rng, DType::F32, &[N4 * 4]);
    let header = r#"
struct Pt {
  float2 xy;
  float a, b;
  float3 rgb;
  Pt(float2 v, float s) : xy(v), a(s), b(-s), rgb(v.x, v.y, s) {}
  float2 shifted() const { return xy + a; }
  void flip() { xy = xy.yx; }
};
"#;
    let src = r#"
        uint i = thread_position_in_grid.x;
        float4 c = float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
        float4 d = c.rgba;
        d.bgr = c.rgb * 2.0f;
        d.a = c.r + c.g;
        d.g += c.b;
        Pt p(c.xy, c.a);
        p.flip();
        p.xy += float2(1.0f, 2.0f);
        p.rgb.r = p.a * 3.0f;
        float2 s = p.shifted();
        uint2 u = uint2(i, i + 1);
        u.gr = u.rg;
        for (int k = 0; k < 4; ++k) {
            o_color[4 * i + k] = d[k];
        }
        o_struct[4 * i] = p.xy.x;
        o_struct[4 * i + 1] = p.xy[1];
        o_struct[4 * i + 2] = p.rgb.x + p.rgb.b;
        o_struct[4 * i + 3] = s.x * s.y + p.b;
        o_mixed[2 * i] = u.x;
        o_mixed[2 * i + 1] = dot(c.rgb, c.bgr);
    "#;
    let kernel = MetalKernel::new("swizzles", &["x"], &["o_color", "o_struct", "o_mixed"], src).unwrap().header(header);
    let spec = LaunchSpec::new([N4 as u32, 1, 1], [16, 1, 1])
        .output(&[N4 * 4], DType::F32)
        .output(&[N4 * 4], DType::F32)
        .output(&[N4 * 2], DType::F32);
    let xv = values(&x);
    let (mut color, mut strukt, mut mixed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..N4 {
        let c: Vec<f64> = xv[4 * i..4 * i + 4].to_vec();
        color.extend([2.0 * c[2], 2.0 * c[1] + c[2], 2.0 * c[0], c[0] + c[1]]);
        let (px, py) = (c[1] + 1.0, c[0] + 2.0);
        strukt.extend([px, py, 4.0 * c[3], (px + c[3]) * (py + c[3]) - c[3]]);
        mixed.extend([(i + 1) as f64, 2.0 * c[0] * c[2] + c[1] * c[1]]);
    }
    Case {
        name: "swizzles",
        program: Program::Body { kernel, inputs: vec![x.into()], spec: Box::new(spec) },
        want: vec![(color, DType::F32), (strukt, DType::F32), (mixed, DType::F32)],
    }
}

fn rgba_swizzles_and_swizzle_named_members(device: Device) {
    run_case(device, swizzles_and_struct_members());
}

backend_tests!(rgba_swizzles_and_swizzle_named_members);

// ---- C++ idioms of MLX kernels in a full file -------------------------------------------------

const IDIOMS: &str = r#"
#include <metal_stdlib>
#include <metal_simdgroup>
using namespace metal;

#define METAL_FUNC inline __attribute__((always_inline))
#define MLX_MTL_PRAGMA_UNROLL _Pragma("clang loop unroll(full)")

using idx_t = int64_t;
typedef float acc_t;

static constant constexpr const int kTable[4] = {1, 2, 3, 5};
constant constexpr float kScale = 0.5f;

enum class Mode : int { Add = 0, Mul = 1 };

template <typename T, int N>
METAL_FUNC void load_row(const device T* src, thread T (&arr)[N]) {
  MLX_MTL_PRAGMA_UNROLL
  for (int i = 0; i < N; ++i) {
    arr[i] = src[i];
  }
}

template <typename T, int N>
inline acc_t sum_arr(thread const T (&arr)[N], Mode mode) {
  acc_t s = mode == Mode::Mul ? 1 : 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s = mode == Mode::Mul ? s * arr[i] : s + arr[i];
  }
  return s;
}

struct Params {
  int n;
  float bias;
};

template <typename T, int N>
[[kernel]] void idioms(
    device const T* const x [[buffer(0)]],
    device float* out [[buffer(1)]],
    constant Params& p [[buffer(2)]],
    uint2 gid [[thread_position_in_grid]],
    uint2 grid [[threads_per_grid]]) {
  enum { kOut = 6 };
  const uint row = gid.y * grid.x + gid.x;
  if (int(row) >= p.n) {
    return;
  }
  thread T vals[N];
  load_row<T, N>(x + row * N, vals);
  auto square = [](float v) { return v * v; };
  idx_t k = kTable[row % 4];
  float s = sum_arr(vals, Mode::Add);
  float prod = sum_arr(vals, Mode::Mul);
  float m = metal::min(s, 1);
  half4 h = half4(float4(s, m, kScale, square(s)));
  uint bits = as_type<uint>(float(h.x));
  device float* o = out + row * kOut;
  o[0] = s + p.bias;
  o[1] = prod;
  o[2] = m * k;
  o[3] = float(h.w);
  o[4] = float(bits >> 16);
  o[5] = metal::max(int(k), 2) + kScale;
}

template [[host_name("idioms_f32")]] [[kernel]] decltype(idioms<float, 4>) idioms<float, 4>;
template [[host_name("idioms_f16")]] [[kernel]] decltype(idioms<half, 3>) idioms<half, 3>;
"#;

/// One full file with the C++ of MLX's kernels: `using`/`typedef` aliases, `static constant
/// constexpr` tables, an `enum class`, unroll pragmas (`#pragma unroll` and `_Pragma`),
/// `template <typename T, int N>` helpers taking `thread T (&arr)[N]`, `device const T* const`,
/// a lambda, `metal::min`/`max` with mixed types, `half4(float4)`, `as_type<uint>` and a
/// `uint2` grid position, run as two template instantiations.
fn mlx_idioms(dtype: DType) -> Case {
    let (w, h) = (5usize, 3usize);
    let rows = w * h;
    let n = if dtype == DType::F32 { 4 } else { 3 };
    let mut rng = Rng::new(104 + n as u64);
    let x = random_array(&mut rng, dtype, &[rows, n]);
    let bias = 0.375f32;
    let mut params = Vec::new();
    params.extend((rows as i32).to_le_bytes());
    params.extend(bias.to_le_bytes());
    let function = if dtype == DType::F32 { "idioms_f32" } else { "idioms_f16" };
    let launch = LibraryLaunch::new(function, Dispatch::Threads([w as u32, h as u32, 1]), [4, 2, 1]);
    let xv = values(&x);
    let table = [1.0f32, 2.0, 3.0, 5.0];
    let mut want = Vec::new();
    for r in 0..rows {
        let v: Vec<f32> = xv[r * n..(r + 1) * n].iter().map(|&v| v as f32).collect();
        let s: f32 = v.iter().sum();
        let prod: f32 = v.iter().product();
        let m = s.min(1.0);
        let k = table[r % 4];
        let hx = f16::from_f32(s);
        let hw = f16::from_f32(s * s);
        want.extend([s + bias, prod, m * k, hw.to_f32(), (hx.to_f32().to_bits() >> 16) as f32, k.max(2.0) + 0.5]);
    }
    let want: Vec<f64> = want.into_iter().map(f64::from).collect();
    Case {
        name: function,
        program: Program::File {
            library: MetalLibrary::new("idioms", IDIOMS),
            args: vec![
                LibraryArg::Array(x),
                LibraryArg::Output { shape: vec![rows * 6], dtype: DType::F32, init_value: None },
                LibraryArg::Bytes(params),
            ],
            launch,
        },
        want: vec![(want, DType::F32)],
    }
}

fn mlx_cpp_idioms_in_a_full_file(device: Device) {
    run_case(device, mlx_idioms(DType::F32));
    run_case(device, mlx_idioms(DType::F16));
}

backend_tests!(mlx_cpp_idioms_in_a_full_file);

/// The same idioms in an `mx.fast.metal_kernel` body and header: `MLX_MTL_CONST` and
/// `MLX_MTL_PRAGMA_UNROLL` from MLX's preamble, a `thread T (&)[N]` helper, a local `using`
/// alias and `enum`, `metal::min(uint, int)`, `half4(float4)` and `as_type`.
fn mlx_body_idioms() -> Case {
    const BN: usize = 4;
    const THREADS: usize = 48;
    let mut rng = Rng::new(105);
    let x = random_array(&mut rng, DType::F16, &[THREADS * BN]);
    let header = r#"
template <typename T, int N>
METAL_FUNC void load_n(const device T* src, thread T (&dst)[N]) {
  MLX_MTL_PRAGMA_UNROLL
  for (int i = 0; i < N; i++) {
    dst[i] = src[i];
  }
}
MLX_MTL_CONST int kMul = 3;
"#;
    let src = r#"
        MLX_MTL_CONST int BN = 4;
        using U = float;
        enum : int { kTwo = 2 };
        uint gid = thread_position_in_grid.x;
        thread T vals[BN];
        load_n<T, BN>(inp + gid * BN, vals);
        U acc = 0;
        for (int i = 0; i < BN; ++i) {
            acc += static_cast<U>(vals[i]) * kMul;
        }
        uint idx = metal::min(gid, BN - 1);
        float4 f4 = float4(vals[0], vals[1], vals[2], vals[3]) * 3.0f;
        half4 h4 = half4(f4);
        out[gid] = acc + float(h4.w) * kTwo + idx + float(as_type<uint>(float(h4.x)) >> 20);
    "#;
    let kernel = MetalKernel::new("body_idioms", &["inp"], &["out"], src).unwrap().header(header);
    let spec =
        LaunchSpec::new([THREADS as u32, 1, 1], [16, 1, 1]).template("T", DType::F16).output(&[THREADS], DType::F32);
    let xv = values(&x);
    let want = (0..THREADS)
        .map(|g| {
            let v = &xv[g * BN..(g + 1) * BN];
            let acc: f32 = v.iter().map(|&a| a as f32 * 3.0).sum();
            let hw = f16::from_f32(v[3] as f32 * 3.0).to_f32();
            let hx = f16::from_f32(v[0] as f32 * 3.0).to_f32();
            (acc + hw * 2.0 + g.min(BN - 1) as f32 + (hx.to_bits() >> 20) as f32) as f64
        })
        .collect();
    Case {
        name: "body_idioms",
        program: Program::Body { kernel, inputs: vec![x.into()], spec: Box::new(spec) },
        want: vec![(want, DType::F32)],
    }
}

fn mlx_cpp_idioms_in_a_body(device: Device) {
    run_case(device, mlx_body_idioms());
}

backend_tests!(mlx_cpp_idioms_in_a_body);

const ROW_REDUCE: &str = r#"
#include <metal_stdlib>
using namespace metal;

struct Accum {
  static constexpr constant int kLanes = 32;
  float s = 0.0f;
  void add(thread const float& v) { s += v; }
};

template <typename T, int N_READS = 4>
[[kernel]] void row_sum(
    const device T* in [[buffer(0)]],
    device T* out [[buffer(1)]],
    constant int& row_size [[buffer(2)]],
    uint gid [[threadgroup_position_in_grid]],
    uint lid [[thread_position_in_threadgroup]],
    uint lsize [[threads_per_threadgroup]],
    uint simd_lane_id [[thread_index_in_simdgroup]],
    uint simd_group_id [[simdgroup_index_in_threadgroup]]) {
  threadgroup float local_sums[Accum::kLanes];
  Accum acc;
  const device T* row = in + gid * row_size;
  for (int i = lid * N_READS; i < row_size; i += lsize * N_READS) {
#pragma clang loop unroll(full)
    for (int j = 0; j < N_READS && i + j < row_size; j++) {
      acc.add(static_cast<float>(row[i + j]));
    }
  }
  float total = simd_sum(acc.s);
  if (simd_lane_id == 0) {
    local_sums[simd_group_id] = total;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd_group_id == 0) {
    total = lid < (lsize + 31) / 32 ? local_sums[simd_lane_id] : 0;
    total = simd_sum(total);
    if (lid == 0) {
      out[gid] = static_cast<T>(total);
    }
  }
}

template [[host_name("row_sum_bf16")]] [[kernel]] decltype(row_sum<bfloat>) row_sum<bfloat>;
"#;

/// MLX's row reduction shape: `N_READS` reads per thread, `simd_sum`, a threadgroup array
/// sized by a struct's `static constexpr constant` member, a conditional choosing a partial
/// sum or `0`, a struct with a default member initialiser and a `thread const float&`
/// parameter, and a `bfloat` instantiation with partial simdgroups (80 threads).
fn mlx_row_reduce() -> Case {
    let (rows, cols) = (6usize, 1000usize);
    let mut rng = Rng::new(106);
    let x = random_array(&mut rng, DType::BF16, &[rows, cols]);
    let xv = values(&x);
    let want = (0..rows).map(|r| xv[r * cols..(r + 1) * cols].iter().sum()).collect();
    let launch = LibraryLaunch::new("row_sum_bf16", Dispatch::Threadgroups([rows as u32, 1, 1]), [80, 1, 1]);
    Case {
        name: "row_sum_bf16",
        program: Program::File {
            library: MetalLibrary::new("row_reduce", ROW_REDUCE),
            args: vec![
                LibraryArg::Array(x),
                LibraryArg::Output { shape: vec![rows], dtype: DType::BF16, init_value: None },
                LibraryArg::Bytes((cols as i32).to_le_bytes().to_vec()),
            ],
            launch,
        },
        want: vec![(want, DType::BF16)],
    }
}

fn mlx_row_reduction_in_a_full_file(device: Device) {
    run_case(device, mlx_row_reduce());
}

backend_tests!(mlx_row_reduction_in_a_full_file);

// ---- every case compiles for CUDA ---------------------------------------------------------

fn all_cases() -> Vec<Case> {
    vec![
        mixed_conditionals(),
        expression_sized_threadgroup_arrays(),
        swizzles_and_struct_members(),
        mlx_idioms(DType::F32),
        mlx_idioms(DType::F16),
        mlx_body_idioms(),
    ]
}

#[test]
fn lowering_keeps_every_line_where_it_was() {
    use kiln::source::lower::{lower, LowerTarget};
    for case in all_cases() {
        let program = program_of(&case);
        for target in [LowerTarget::Cpu, LowerTarget::Cuda] {
            let module = lower(&program, target).unwrap();
            let (got, want) = (module.code.lines().count(), program.source.lines().count());
            assert_eq!(got, want, "{} for {target:?}: line count changed", case.name);
        }
    }
}

#[test]
fn every_case_compiles_with_nvrtc() {
    use kiln::backend::cuda;
    if !common::nvrtc_or_skip() {
        return;
    }
    for case in all_cases() {
        let program = program_of(&case);
        let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| {
            let source = cuda::translate(&program).unwrap_or_default();
            panic!("{}: {e}\n---- generated CUDA ----\n{source}", case.name)
        });
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", case.name);
    }
}

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
sanitizer_clean_tests!(threadgroup_arrays_sized_by_expressions_are_shared, mlx_row_reduction_in_a_full_file);
