//! Metal's composite types on every backend: packed vectors (size, alignment, access through
//! device pointers, conversion to and from vectors, swizzles, arithmetic), matrices
//! (column-major constructors, m*v, v*m, m*m, +, -, scalar *, transpose, determinant),
//! `metal::array` in thread, threadgroup, device and constant memory, reflect / refract /
//! faceforward, postfix ++/-- on vectors, and program-scope `constant` and `constexpr` values of
//! vector, half, bfloat, matrix, packed and array type. Those must be initialised at compile
//! time (CUDA refuses dynamic initialisation of `__constant__` data) and round exactly as the
//! run-time conversions do. References are computed here from the Metal definitions: exact
//! where the kernel's operations are exact, otherwise in f64 with an error bound proportional to
//! the magnitudes summed (so cancellation cannot hide a wrong formula).

mod common;

use common::{on, Rng};
use half::{bf16, f16};
use kiln::backend::{cuda, ConstantKey, ConstantValue, Dispatch, MetalProgram};
use kiln::{Array, DType, Device, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};

const THREADS: usize = 64;
const F32_EPS: f64 = 1.0 / (1u64 << 24) as f64;
const F16_EPS: f64 = 1.0 / 2048.0;

/// A body kernel with its inputs, outputs and the value its outputs are poisoned with.
struct Case {
    kernel: MetalKernel,
    inputs: Vec<Array>,
    outputs: Vec<(usize, DType)>,
    poison: f64,
}

impl Case {
    fn spec(&self, device: Device) -> LaunchSpec {
        let n = THREADS as u32;
        let mut spec = LaunchSpec::new([n, 1, 1], [n, 1, 1]).device(device).init_value(self.poison);
        for &(len, dtype) in &self.outputs {
            spec = spec.output(&[len], dtype);
        }
        spec
    }

    fn run(&self, device: Device) -> Vec<Array> {
        let inputs: Vec<_> = self.inputs.iter().map(|a| on(device, a)).collect();
        self.kernel.call(&inputs, &self.spec(device)).unwrap()
    }

    fn program(&self) -> MetalProgram {
        self.kernel.program(&self.kernel.generate(&self.inputs, &self.spec(Device::Cpu)).unwrap())
    }
}

fn body(name: &str, inputs: &[&str], outputs: &[&str], header: &str, source: &str) -> MetalKernel {
    MetalKernel::new(name, inputs, outputs, source).unwrap().header(header)
}

fn host<T: kiln::dtype::Element>(a: &Array) -> Vec<T> {
    a.to_host().unwrap().to_vec::<T>().unwrap()
}

fn f32s(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
    rng.normals(n, scale).into_iter().map(|v| v as f32).collect()
}

/// Exact comparison of float results (bit for bit, so -0 and 0 differ).
#[track_caller]
fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .map(|i| format!("[{i}] got {} want {}", got[i], want[i]))
        .collect();
    assert!(bad.is_empty(), "{what}: {} wrong, first {:?}", bad.len(), &bad[..bad.len().min(6)]);
}

/// |got - want| <= bound element-wise (a NaN fails).
#[track_caller]
fn assert_within(what: &str, got: &[f32], want: &[f64], bound: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| {
            let err = (got[i] as f64 - want[i]).abs();
            err.is_nan() || err > bound[i]
        })
        .map(|i| format!("[{i}] got {} want {} (bound {:e})", got[i], want[i], bound[i]))
        .collect();
    assert!(bad.is_empty(), "{what}: {} out of bounds, first {:?}", bad.len(), &bad[..bad.len().min(6)]);
}

// ---- packed vectors ----

const PACKED_HEADER: &str = r#"
struct WithPacked { float a; packed_float3 b; };
struct HalfRecord { half h; packed_half3 v; float f; };
"#;

const PACKED_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    device const packed_float3* px = reinterpret_cast<device const packed_float3*>(x);
    packed_float3 p = px[i];
    float3 v = p;
    device packed_float3* pm = reinterpret_cast<device packed_float3*>(moved);
    pm[i] = v.zxy * 2.0f;
    packed_float3 q = p;
    q.xy = p.yx;
    q[2] = -q[2];
    q += 1.0f;
    float3 s = p * q;
    bool3 c = p < q;
    packed_float3 r = q++;
    device const WithPacked* w = reinterpret_cast<device const WithPacked*>(x);
    device float* o = parts + 10 * i;
    o[0] = p.x; o[1] = p[1]; o[2] = p.b;
    o[3] = q.x; o[4] = q.y; o[5] = q.z;
    o[6] = s.y; o[7] = r.z; o[8] = w[i].b.y;
    o[9] = float(c.x) + 2.0f * float(c.y) + 4.0f * float(c.z);
    half4 hv = half4(reinterpret_cast<device const packed_half4*>(h)[i]);
    half3 hw = reinterpret_cast<device const packed_half3*>(h)[i];
    device const HalfRecord* rec = reinterpret_cast<device const HalfRecord*>(h);
    device packed_half4* hp = reinterpret_cast<device packed_half4*>(hout);
    hp[i] = packed_half4(hv.wzyx);
    device float* g = halves + 4 * i;
    g[0] = float(hw.x); g[1] = float(hw.z); g[2] = float(rec[i].v.y); g[3] = float(rec[i].h);
    if (i == 0) {
        sizes[0] = sizeof(packed_float3); sizes[1] = alignof(packed_float3);
        sizes[2] = sizeof(packed_half3); sizes[3] = alignof(packed_half3);
        sizes[4] = sizeof(packed_float4); sizes[5] = alignof(packed_float4);
        sizes[6] = sizeof(packed_uchar3); sizes[7] = sizeof(packed_short2);
        sizes[8] = sizeof(WithPacked); sizes[9] = sizeof(HalfRecord);
        sizes[10] = sizeof(packed_int2); sizes[11] = alignof(packed_int4);
        sizes[12] = sizeof(packed_bfloat3); sizes[13] = sizeof(float3);
    }
"#;

fn packed_case(rng: &mut Rng) -> Case {
    let x = Array::from_vec(&[4 * THREADS], f32s(rng, 4 * THREADS, 2.0)).unwrap();
    let h = Array::from_f64(DType::F16, &[6 * THREADS], &rng.normals(6 * THREADS, 3.0)).unwrap();
    let kernel = body(
        "packed_vectors",
        &["x", "h"],
        &["moved", "parts", "hout", "halves", "sizes"],
        PACKED_HEADER,
        PACKED_SOURCE,
    );
    let outputs = vec![
        (3 * THREADS, DType::F32),
        (10 * THREADS, DType::F32),
        (4 * THREADS, DType::F16),
        (4 * THREADS, DType::F32),
        (14, DType::I32),
    ];
    Case { kernel, inputs: vec![x, h], outputs, poison: f64::NAN }
}

// packed_float3 is 12 bytes with float alignment; reads and writes through device pointers,
// conversions both ways, swizzle reads and writes, indexing, arithmetic, comparison, postfix
// increment, packed members of structs, and packed half vectors.
fn packed_vectors_are_unpadded_and_behave_as_vectors(device: Device) {
    let case = packed_case(&mut Rng::new(501));
    let out = case.run(device);
    let x: Vec<f32> = host(&case.inputs[0]);
    let h: Vec<f16> = host(&case.inputs[1]);
    let (mut moved, mut parts, mut hout, mut halves) = (vec![], vec![], vec![], vec![]);
    for i in 0..THREADS {
        let p = [x[3 * i], x[3 * i + 1], x[3 * i + 2]];
        moved.extend([2.0 * p[2], 2.0 * p[0], 2.0 * p[1]]);
        let q = [p[1] + 1.0, p[0] + 1.0, -p[2] + 1.0];
        let c = (0..3).map(|k| if p[k] < q[k] { (1 << k) as f32 } else { 0.0 }).sum::<f32>();
        parts.extend([p[0], p[1], p[2], q[0] + 1.0, q[1] + 1.0, q[2] + 1.0, p[1] * q[1], q[2], x[4 * i + 2], c]);
        hout.extend((0..4).map(|k| h[4 * i + 3 - k]));
        halves.extend([h[3 * i], h[3 * i + 2], h[6 * i + 2], h[6 * i]].map(f32::from));
    }
    assert_bits("packed_float3 written from float3.zxy * 2", &host::<f32>(&out[0]), &moved);
    assert_bits("packed_float3 components and arithmetic", &host::<f32>(&out[1]), &parts);
    let got_h: Vec<u16> = host::<f16>(&out[2]).iter().map(|v| v.to_bits()).collect();
    let want_h: Vec<u16> = hout.iter().map(|v| v.to_bits()).collect();
    assert_eq!(got_h, want_h, "packed_half4 written from half4.wzyx");
    assert_bits("packed half views", &host::<f32>(&out[3]), &halves);
    assert_eq!(host::<i32>(&out[4]), vec![12, 4, 6, 2, 16, 4, 3, 4, 16, 12, 8, 4, 6, 16], "sizes and alignments");
}

// ---- matrices ----

const MATRIX_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    device const float* e = a + 16 * i;
    float4x4 A = float4x4(float4(e[0], e[1], e[2], e[3]), float4(e[4], e[5], e[6], e[7]),
                          float4(e[8], e[9], e[10], e[11]), float4(e[12], e[13], e[14], e[15]));
    float4 x = float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    float2x3 M = float2x3(e[0], e[1], e[2], e[3], e[4], e[5]);
    float3x2 N = float3x2(x.xy, x.zw, x.yx);
    device float* o = prod + 31 * i;
    int k = 0;
    float4 r0 = A * x; for (int j = 0; j < 4; ++j) o[k++] = r0[j];
    float4 r1 = x * A; for (int j = 0; j < 4; ++j) o[k++] = r1[j];
    float3 r2 = M * x.xy; o[k++] = r2.x; o[k++] = r2.y; o[k++] = r2.z;
    float2 r3 = x.xyz * M; o[k++] = r3.x; o[k++] = r3.y;
    float3x3 P = M * N; o[k++] = P[0][0]; o[k++] = P[1][2]; o[k++] = P[2][1];
    float4x4 S = A + A * 0.5f - 2.0f * transpose(A); o[k++] = S[1][2]; o[k++] = S[3][0];
    float4x4 Q = A * transpose(A); o[k++] = Q[2][3]; o[k++] = Q[0][0];
    float2x2 D = float2x2(x.xy, x.zw); D *= 3.0f; D -= float2x2(1.0f);
    o[k++] = D[0][0]; o[k++] = D[1][0]; o[k++] = D[0][1];
    float3x3 T = float3x3(A[0].xyz, A[1].xyz, A[2].xyz);
    float3 t = T * x.xyz; o[k++] = t.x; o[k++] = t.y; o[k++] = t.z;
    float4x4 C = A; C[1] = x; C[2][3] = 7.0f; C[0].y = -1.0f;
    float4 c = C * float4(1.0f, 2.0f, 3.0f, 4.0f); for (int j = 0; j < 4; ++j) o[k++] = c[j];
    float4x4 G = -A; o[k++] = G[3][1];
    det[3 * i] = determinant(A); det[3 * i + 1] = determinant(T); det[3 * i + 2] = determinant(D);
    device const half* hh = hm + 9 * i;
    half3x3 H = half3x3(half3(hh[0], hh[1], hh[2]), half3(hh[3], hh[4], hh[5]), half3(hh[6], hh[7], hh[8]));
    half3 hr = H * half3(1.0h, -0.5h, 2.0h);
    hres[3 * i] = hr.x; hres[3 * i + 1] = hr.y; hres[3 * i + 2] = hr.z;
    float2x2 I = float2x2(1.5f);
    float3x3 Hf = float3x3(H);
    device float* z = exact + 12 * i;
    z[0] = I[0][0]; z[1] = I[0][1]; z[2] = I[1][0]; z[3] = I[1][1];
    z[4] = M[1][0]; z[5] = M[0][2]; z[6] = transpose(M)[2][1]; z[7] = Hf[2][1];
    z[8] = sizeof(float3x3); z[9] = sizeof(half3x3); z[10] = sizeof(float2x3); z[11] = alignof(float2x2);
"#;

fn matrix_case(rng: &mut Rng) -> Case {
    let a = Array::from_vec(&[16 * THREADS], f32s(rng, 16 * THREADS, 1.0)).unwrap();
    let v = Array::from_vec(&[4 * THREADS], f32s(rng, 4 * THREADS, 1.0)).unwrap();
    let hm = Array::from_f64(DType::F16, &[9 * THREADS], &rng.normals(9 * THREADS, 1.0)).unwrap();
    let kernel = body("matrices", &["a", "v", "hm"], &["prod", "det", "hres", "exact"], "", MATRIX_SOURCE);
    let outputs = vec![
        (31 * THREADS, DType::F32),
        (3 * THREADS, DType::F32),
        (3 * THREADS, DType::F16),
        (12 * THREADS, DType::F32),
    ];
    Case { kernel, inputs: vec![a, v, hm], outputs, poison: f64::NAN }
}

/// A matrix as Metal stores it: m[column][row].
type Mat = Vec<Vec<f64>>;

fn mat_vec(m: &Mat, x: &[f64]) -> Vec<f64> {
    (0..m[0].len()).map(|r| (0..m.len()).map(|c| m[c][r] * x[c]).sum()).collect()
}
fn vec_mat(x: &[f64], m: &Mat) -> Vec<f64> {
    m.iter().map(|col| col.iter().zip(x).map(|(a, b)| a * b).sum()).collect()
}
fn mat_mat(a: &Mat, b: &Mat) -> Mat {
    b.iter().map(|col| mat_vec(a, col)).collect()
}
fn transpose(m: &Mat) -> Mat {
    (0..m[0].len()).map(|r| m.iter().map(|col| col[r]).collect()).collect()
}
fn combine(a: &Mat, b: &Mat, f: impl Fn(f64, f64) -> f64) -> Mat {
    a.iter().zip(b).map(|(x, y)| x.iter().zip(y).map(|(p, q)| f(*p, *q)).collect()).collect()
}
/// Σ over permutations of sign · Π m[σ(c)][c]; with `abs` every sign is +.
fn det(m: &Mat, abs: bool) -> f64 {
    fn perms(n: usize) -> Vec<(Vec<usize>, f64)> {
        if n == 1 {
            return vec![(vec![0], 1.0)];
        }
        let mut out = Vec::new();
        for (p, s) in perms(n - 1) {
            for pos in 0..n {
                let mut q = p.clone();
                q.insert(pos, n - 1);
                let moves = n - 1 - pos;
                out.push((q, if moves % 2 == 0 { s } else { -s }));
            }
        }
        out
    }
    perms(m.len())
        .iter()
        .map(|(p, s)| (if abs { 1.0 } else { *s }) * (0..m.len()).map(|c| m[c][p[c]]).product::<f64>())
        .sum()
}

/// The kernel's float outputs from A, x (Metal order); with `abs` every subtraction and
/// negation adds instead, which gives the magnitude the rounding errors scale with.
fn matrix_reference(e: &[f64], x: &[f64], abs: bool) -> (Vec<f64>, Vec<f64>) {
    let sub = |p: f64, q: f64| if abs { p + q } else { p - q };
    let a: Mat = (0..4).map(|c| e[4 * c..4 * c + 4].to_vec()).collect();
    let m: Mat = vec![e[0..3].to_vec(), e[3..6].to_vec()];
    let n: Mat = vec![vec![x[0], x[1]], vec![x[2], x[3]], vec![x[1], x[0]]];
    let mut o = mat_vec(&a, x);
    o.extend(vec_mat(x, &a));
    o.extend(mat_vec(&m, &x[..2]));
    o.extend(vec_mat(&x[..3], &m));
    let p = mat_mat(&m, &n);
    o.extend([p[0][0], p[1][2], p[2][1]]);
    let s = combine(&combine(&a, &a, |p, q| p + 0.5 * q), &transpose(&a), |p, q| sub(p, 2.0 * q));
    o.extend([s[1][2], s[3][0]]);
    let q = mat_mat(&a, &transpose(&a));
    o.extend([q[2][3], q[0][0]]);
    let d: Mat = vec![vec![sub(3.0 * x[0], 1.0), 3.0 * x[1]], vec![3.0 * x[2], sub(3.0 * x[3], 1.0)]];
    o.extend([d[0][0], d[1][0], d[0][1]]);
    let t: Mat = (0..3).map(|c| a[c][..3].to_vec()).collect();
    o.extend(mat_vec(&t, &x[..3]));
    let mut cm = a.clone();
    cm[1] = x.to_vec();
    cm[2][3] = 7.0;
    cm[0][1] = if abs { 1.0 } else { -1.0 };
    o.extend(mat_vec(&cm, &[1.0, 2.0, 3.0, 4.0]));
    o.push(if abs { a[3][1] } else { -a[3][1] });
    (o, vec![det(&a, abs), det(&t, abs), det(&d, abs)])
}

// Column-major construction (columns, C*R scalars, diagonal, conversion), indexing and element
// writes, every product shape, sums, scalar products, transpose and determinants.
fn matrices_follow_metal_column_major_semantics(device: Device) {
    let case = matrix_case(&mut Rng::new(502));
    let out = case.run(device);
    let a: Vec<f64> = host::<f32>(&case.inputs[0]).iter().map(|&v| v as f64).collect();
    let v: Vec<f64> = host::<f32>(&case.inputs[1]).iter().map(|&v| v as f64).collect();
    let hm: Vec<f16> = host(&case.inputs[2]);
    let (mut prod, mut prod_b, mut dets, mut dets_b, mut hres, mut hres_b, mut exact) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..THREADS {
        let e = &a[16 * i..16 * i + 16];
        let x = &v[4 * i..4 * i + 4];
        let (o, d) = matrix_reference(e, x, false);
        let ea: Vec<f64> = e.iter().map(|v| v.abs()).collect();
        let xa: Vec<f64> = x.iter().map(|v| v.abs()).collect();
        let (ob, db) = matrix_reference(&ea, &xa, true);
        prod.extend(o);
        prod_b.extend(ob.iter().map(|s| 8.0 * F32_EPS * s));
        dets.extend(d);
        dets_b.extend(db.iter().map(|s| 16.0 * F32_EPS * s));
        let hmat: Mat = (0..3).map(|c| (0..3).map(|r| f64::from(hm[9 * i + 3 * c + r])).collect()).collect();
        let hx = [1.0, -0.5, 2.0];
        hres.extend(mat_vec(&hmat, &hx));
        let habs: Mat = hmat.iter().map(|c| c.iter().map(|v| v.abs()).collect()).collect();
        hres_b.extend(mat_vec(&habs, &[1.0, 0.5, 2.0]).iter().map(|s| 6.0 * F16_EPS * s));
        let f = |k: usize| e[k] as f32;
        exact.extend([1.5, 0.0, 0.0, 1.5, f(3), f(2), f(5), f32::from(hm[9 * i + 7]), 48.0, 24.0, 32.0, 8.0]);
    }
    assert_within("matrix products and sums", &host::<f32>(&out[0]), &prod, &prod_b);
    assert_within("determinants", &host::<f32>(&out[1]), &dets, &dets_b);
    let got_h: Vec<f32> = host::<f16>(&out[2]).iter().map(|&v| f32::from(v)).collect();
    assert_within("half3x3 * half3", &got_h, &hres, &hres_b);
    assert_bits("constructors, indexing, transpose, conversion, sizes", &host::<f32>(&out[3]), &exact);
}

// ---- reflect, refract, faceforward ----

const GEOMETRY_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    float3 ii = float3(aux[7 * i], aux[7 * i + 1], aux[7 * i + 2]);
    float3 nn = float3(aux[7 * i + 3], aux[7 * i + 4], aux[7 * i + 5]);
    float eta = aux[7 * i + 6];
    float4 x = float4(b[8 * i], b[8 * i + 1], b[8 * i + 2], b[8 * i + 3]);
    float4 y = float4(b[8 * i + 4], b[8 * i + 5], b[8 * i + 6], b[8 * i + 7]);
    half3 hi = half3(ii * 2.0f);
    device float* o = out + 16 * i;
    float3 r = reflect(ii, nn); o[0] = r.x; o[1] = r.y; o[2] = r.z;
    float4 r4 = reflect(x, normalize(y)); o[3] = r4.x; o[4] = r4.y; o[5] = r4.z; o[6] = r4.w;
    float3 t = refract(ii, nn, eta); o[7] = t.x; o[8] = t.y; o[9] = t.z;
    float3 f = faceforward(nn, ii, y.xyz); o[10] = f.x; o[11] = f.y; o[12] = f.z;
    half3 hr = reflect(hi, half3(nn)); o[13] = float(hr.x); o[14] = float(hr.y); o[15] = float(hr.z);
"#;

fn unit(rng: &mut Rng) -> [f64; 3] {
    let v = [rng.normal(), rng.normal(), rng.normal()];
    let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    v.map(|c| (c / l) as f32 as f64)
}
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(p, q)| p * q).sum()
}

fn geometry_case(rng: &mut Rng) -> Case {
    let mut aux = Vec::new();
    let b = f32s(rng, 8 * THREADS, 2.0);
    for i in 0..THREADS {
        // Away from k = 0 (where refract switches) and from dot(Nref, I) = 0, in both regimes.
        loop {
            let (ii, nn) = (unit(rng), unit(rng));
            let eta = rng.uniform(0.5, 1.7) as f32 as f64;
            let d = dot(&nn, &ii);
            let k = 1.0 - eta * eta * (1.0 - d * d);
            if k.abs() > 0.05
                && (k < 0.0) == (i % 3 == 0)
                && dot(&b[8 * i + 4..8 * i + 7].iter().map(|&v| v as f64).collect::<Vec<_>>(), &ii).abs() > 0.05
            {
                aux.extend(ii.iter().chain(&nn).map(|&v| v as f32));
                aux.push(eta as f32);
                break;
            }
        }
    }
    let inputs = vec![Array::from_vec(&[7 * THREADS], aux).unwrap(), Array::from_vec(&[8 * THREADS], b).unwrap()];
    let kernel = body("geometry", &["aux", "b"], &["out"], "", GEOMETRY_SOURCE);
    Case { kernel, inputs, outputs: vec![(16 * THREADS, DType::F32)], poison: f64::NAN }
}

// reflect(I, N) = I - 2 dot(N, I) N; refract gives 0 on total internal reflection and
// eta I - (eta dot(N, I) + sqrt(k)) N otherwise; faceforward(N, I, Nref) = dot(Nref, I) < 0 ? N : -N.
fn reflect_refract_faceforward_follow_their_definitions(device: Device) {
    let case = geometry_case(&mut Rng::new(503));
    let out = host::<f32>(&case.run(device)[0]);
    let aux: Vec<f64> = host::<f32>(&case.inputs[0]).iter().map(|&v| v as f64).collect();
    let b: Vec<f64> = host::<f32>(&case.inputs[1]).iter().map(|&v| v as f64).collect();
    let (mut want, mut bound) = (Vec::new(), Vec::new());
    for i in 0..THREADS {
        let (ii, nn, eta) = (&aux[7 * i..7 * i + 3], &aux[7 * i + 3..7 * i + 6], aux[7 * i + 6]);
        let (x, y) = (&b[8 * i..8 * i + 4], &b[8 * i + 4..8 * i + 8]);
        let abs = |v: &[f64]| v.iter().map(|c| c.abs()).collect::<Vec<_>>();
        let d = dot(nn, ii);
        let da = dot(&abs(nn), &abs(ii));
        for c in 0..3 {
            want.push(ii[c] - 2.0 * d * nn[c]);
            bound.push(8.0 * F32_EPS * (ii[c].abs() + 2.0 * da * nn[c].abs()));
        }
        let ly = dot(y, y).sqrt();
        let ny: Vec<f64> = y.iter().map(|c| c / ly).collect();
        let dy = dot(&ny, x);
        let dya = dot(&abs(&ny), &abs(x));
        for c in 0..4 {
            want.push(x[c] - 2.0 * dy * ny[c]);
            bound.push(32.0 * F32_EPS * (x[c].abs() + 2.0 * dya * ny[c].abs()));
        }
        let k = 1.0 - eta * eta * (1.0 - d * d);
        for c in 0..3 {
            if k < 0.0 {
                want.push(0.0);
                bound.push(0.0);
            } else {
                want.push(eta * ii[c] - (eta * d + k.sqrt()) * nn[c]);
                bound.push(64.0 * F32_EPS * (eta * ii[c].abs() + (eta * da + k.sqrt() + 1.0 / k.sqrt()) * nn[c].abs()));
            }
        }
        let s = if dot(&y[..3], ii) < 0.0 { 1.0 } else { -1.0 };
        want.extend(nn.iter().map(|c| s * c));
        bound.extend([0.0; 3]);
        let hi: Vec<f64> = ii.iter().map(|c| f64::from(f16::from_f64(2.0 * c))).collect();
        let hn: Vec<f64> = nn.iter().map(|c| f64::from(f16::from_f64(*c))).collect();
        let hd = dot(&hn, &hi);
        let hda = dot(&abs(&hn), &abs(&hi));
        for c in 0..3 {
            want.push(hi[c] - 2.0 * hd * hn[c]);
            bound.push(8.0 * F16_EPS * (hi[c].abs() + 2.0 * hda * hn[c].abs()));
        }
    }
    assert_within("reflect, refract, faceforward", &out, &want, &bound);
}

// ---- postfix increment and decrement ----

const POSTFIX_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    int4 v = int4(ia[4 * i], ia[4 * i + 1], ia[4 * i + 2], ia[4 * i + 3]);
    int4 w = v++;
    int4 z = v--;
    uint2 u = uint2(v.xy);
    uint2 t = u--;
    uchar4 c = uchar4(v);
    uchar4 d = c++;
    short3 s = short3(v.yzw);
    short3 s0 = s--;
    device int* o = out + 22 * i;
    for (int k = 0; k < 4; ++k) { o[k] = w[k]; o[4 + k] = z[k]; o[8 + k] = v[k]; o[12 + k] = d[k]; o[16 + k] = c[k]; }
    o[20] = s0.x * 3 + s.z; o[21] = s.y;
    uo[4 * i] = t.x; uo[4 * i + 1] = t.y; uo[4 * i + 2] = u.x; uo[4 * i + 3] = u.y;
"#;

fn postfix_case(rng: &mut Rng) -> Case {
    let mut ia: Vec<i32> = (0..4 * THREADS).map(|_| (rng.next_u64() % 20001) as i32 - 10000).collect();
    ia[..8].copy_from_slice(&[0, 255, -1, 256, 1, 0, 511, -256]);
    let kernel = body("postfix", &["ia"], &["out", "uo"], "", POSTFIX_SOURCE);
    let outputs = vec![(22 * THREADS, DType::I32), (4 * THREADS, DType::U32)];
    Case { kernel, inputs: vec![Array::from_vec(&[4 * THREADS], ia).unwrap()], outputs, poison: 77.0 }
}

// `v++` / `v--` on integer vectors return the old value and step every component (unsigned and
// 8-bit components wrap).
fn postfix_increment_and_decrement_step_every_component(device: Device) {
    let case = postfix_case(&mut Rng::new(504));
    let out = case.run(device);
    let ia: Vec<i32> = host(&case.inputs[0]);
    let (mut want, mut want_u) = (Vec::new(), Vec::new());
    for i in 0..THREADS {
        let x = &ia[4 * i..4 * i + 4];
        want.extend(x.iter().copied());
        want.extend(x.iter().map(|v| v + 1));
        want.extend(x.iter().copied());
        want.extend(x.iter().map(|&v| (v as u8) as i32));
        want.extend(x.iter().map(|&v| (v as u8).wrapping_add(1) as i32));
        let s: Vec<i16> = x[1..].iter().map(|&v| v as i16).collect();
        want.push(s[0] as i32 * 3 + (s[2] - 1) as i32);
        want.push((s[1] - 1) as i32);
        want_u.extend([x[0] as u32, x[1] as u32, (x[0] as u32).wrapping_sub(1), (x[1] as u32).wrapping_sub(1)]);
    }
    assert_eq!(host::<i32>(&out[0]), want, "int4, uchar4 and short3 postfix");
    assert_eq!(host::<u32>(&out[1]), want_u, "uint2 postfix decrement");
}

// ---- metal::array ----

const ARRAY_HEADER: &str = r#"
constant metal::array<float, 4> WEIGHTS = {0.5f, -2.0f, 4.0f, 0.25f};
constant metal::array<int3, 2> OFFSETS = {int3(1, 2, 3), int3(-4, 5, -6)};
inline float weighted(thread const metal::array<float, 4>& vals) {
    float s = 0.0f;
    for (uint k = 0; k < vals.size(); ++k) s += vals[k] * WEIGHTS[k];
    return s;
}
template <typename T, size_t N> T total(thread const metal::array<T, N>& vals) {
    T s = T(0);
    for (auto v : vals) s += v;
    return s;
}
"#;

const ARRAY_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    uint l = thread_position_in_threadgroup.x;
    threadgroup metal::array<float, 64> shared_vals;
    shared_vals[l] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    metal::array<float, 4> mine = {x[i], shared_vals[(l + 1) % 64], x[(i + 7) % 64], 1.0f};
    mine[3] = -mine[3];
    device const metal::array<float, 4>* rows = reinterpret_cast<device const metal::array<float, 4>*>(x);
    metal::array<float2, 2> pairs{{float2(x[i], 2.0f), float2(3.0f, x[i])}};
    device float* o = out + 6 * i;
    o[0] = weighted(mine);
    o[1] = total(mine);
    o[2] = rows[i / 4][(i + 1) % 4];
    o[3] = pairs[1].y * pairs[0].y;
    o[4] = float(OFFSETS[i % 2][i % 3]) + float(mine.size()) * 10.0f + float(OFFSETS.size()) * 100.0f;
    o[5] = mine.front() - mine.back();
    device metal::array<float, 2>* w = reinterpret_cast<device metal::array<float, 2>*>(pair_out);
    w[i][0] = pairs[0].x;
    w[i][1] = pairs[1][0];
"#;

fn array_case(rng: &mut Rng) -> Case {
    let x = Array::from_vec(&[THREADS], f32s(rng, THREADS, 3.0)).unwrap();
    let kernel = body("metal_array", &["x"], &["out", "pair_out"], ARRAY_HEADER, ARRAY_SOURCE);
    Case {
        kernel,
        inputs: vec![x],
        outputs: vec![(6 * THREADS, DType::F32), (2 * THREADS, DType::F32)],
        poison: f64::NAN,
    }
}

// metal::array as a thread value (brace and nested initialisation, indexing, size, front/back,
// range-for, by reference to helpers), in threadgroup memory, viewed through device pointers, and
// as program-scope constant data.
fn metal_array_works_in_every_address_space(device: Device) {
    let case = array_case(&mut Rng::new(505));
    let out = case.run(device);
    let x: Vec<f32> = host(&case.inputs[0]);
    let (w, offs) = ([0.5f32, -2.0, 4.0, 0.25], [[1, 2, 3], [-4, 5, -6]]);
    let (mut want, mut pairs) = (Vec::new(), Vec::new());
    for i in 0..THREADS {
        let mine = [x[i], x[(i + 1) % 64], x[(i + 7) % 64], -1.0f32];
        let weighted = mine.iter().zip(w).fold(0.0f32, |s, (v, c)| s + v * c);
        let total = mine.iter().fold(0.0f32, |s, v| s + v);
        let o4 = offs[i % 2][i % 3] as f32 + 40.0 + 200.0;
        want.extend([weighted, total, x[4 * (i / 4) + (i + 1) % 4], x[i] * 2.0, o4, mine[0] - mine[3]]);
        pairs.extend([x[i], 3.0]);
    }
    assert_bits("metal::array values", &host::<f32>(&out[0]), &want);
    assert_bits("metal::array through a device pointer", &host::<f32>(&out[1]), &pairs);
}

// ---- compile-time constants ----

/// Floats that exercise rounding to half and to bfloat: random magnitudes from half's
/// subnormals to beyond its range, exact ties between neighbours of both formats (and their
/// float neighbours), signed zeros, the largest finite values and the overflow thresholds.
fn rounding_values(rng: &mut Rng) -> Vec<f32> {
    let mut v = vec![0.0f32, -0.0, 65504.0, 65519.99, 65520.0, -65520.0, 6.0e-8, 2.98e-8, 3.0e38, -3.4e38];
    for scale in [1e-7, 1e-5, 1e-3, 1.0, 1e3, 3e4, 1e5] {
        v.extend(f32s(rng, 12, scale));
    }
    for _ in 0..24 {
        let h = (rng.next_u64() % 0x7bff) as u16;
        let mid = ((f64::from(f16::from_bits(h)) + f64::from(f16::from_bits(h + 1))) / 2.0) as f32;
        let b = (rng.next_u64() % 0x7f7f) as u32;
        let bmid = f32::from_bits((b << 16) | 0x8000);
        for t in [mid, bmid] {
            v.extend([t, -t, f32::from_bits(t.to_bits() + 1), f32::from_bits(t.to_bits() - 1)]);
        }
    }
    v
}

fn literal(v: f32) -> String {
    format!("{v:e}f")
}

/// A header of program-scope constants and constexpr values, the kernel reading them, and the
/// values it must write to `misc`.
fn constants_case(rng: &mut Rng) -> (Case, Vec<f32>, Vec<f32>) {
    let vals = rounding_values(rng);
    let n = vals.len();
    let list = |ty: &str| vals.iter().map(|&v| format!("{ty}({})", literal(v))).collect::<Vec<_>>().join(", ");
    let v4 = f32s(rng, 8, 10.0);
    let header = format!(
        r#"
constant half H_TABLE[{n}] = {{{}}};
static constant bfloat B_TABLE[{n}] = {{{}}};
constant constexpr half HX_TABLE[{n}] = {{{}}};
constant constexpr bfloat BX_TABLE[{n}] = {{{}}};
constant float4 V4[2] = {{float4({}, {}, {}, {}), float4({}, {}, {}, {})}};
constant half2 CH = half2(1.5h, -2.25h);
constant int3 CI = int3(1, -2, 3);
constant bfloat2 CB = bfloat2(0.1f, -3.0f);
constant float3x3 CM = float3x3(1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 10.0f);
constant half2x2 CHM = half2x2(0.1h);
constant packed_float3 CP = packed_float3(1.0f, -2.0f, 0.5f);
constant metal::array<half, 3> CA = {{half(0.3f), -0.7h, half(1e-6f)}};
constant float4 CS = float4(half4(0.1f, 0.2f, 0.3f, 0.4f));
constexpr float2 CV = float2(1.0f, 2.0f);
static_assert(CV.y == 2.0f && CV.yx.x == 2.0f, "constexpr vector and swizzle");
constexpr half CHH = 0.1h;
static_assert(float(CHH) == 0.0999755859375f, "constexpr half rounds to nearest");
static_assert(float(-CHH) == -0.0999755859375f, "constexpr half negation");
constexpr bfloat CBB = bfloat(-0.1f);
"#,
        list("half"),
        list("bfloat"),
        list("half"),
        list("bfloat"),
        literal(v4[0]),
        literal(v4[1]),
        literal(v4[2]),
        literal(v4[3]),
        literal(v4[4]),
        literal(v4[5]),
        literal(v4[6]),
        literal(v4[7]),
    );
    let source = format!(
        r#"
    uint i = thread_position_in_grid.x;
    for (uint k = i; k < {n}; k += {THREADS}) {{
        hbits[k] = as_type<ushort>(H_TABLE[k]);
        bbits[k] = as_type<ushort>(B_TABLE[k]);
        hbits[{n} + k] = as_type<ushort>(HX_TABLE[k]);
        bbits[{n} + k] = as_type<ushort>(BX_TABLE[k]);
    }}
    if (i == 0) {{
        int k = 0;
        for (int j = 0; j < 8; ++j) misc[k++] = V4[j / 4][j % 4];
        misc[k++] = CH.x; misc[k++] = CH.y;
        misc[k++] = CI.x; misc[k++] = CI.y; misc[k++] = CI.z;
        misc[k++] = CB.x; misc[k++] = CB.y;
        misc[k++] = CM[1][2]; misc[k++] = CM[2][2]; misc[k++] = CHM[0][0]; misc[k++] = CHM[1][0];
        misc[k++] = CP.x; misc[k++] = CP[1]; misc[k++] = CP.z;
        misc[k++] = CA[0]; misc[k++] = CA[1]; misc[k++] = CA[2];
        misc[k++] = CS.x; misc[k++] = CS.w;
        misc[k++] = CV.x; misc[k++] = CHH; misc[k++] = CBB;
    }}
"#
    );
    let kernel = body("constant_tables", &[], &["hbits", "bbits", "misc"], &header, &source);
    let outputs = vec![(2 * n, DType::U16), (2 * n, DType::U16), (30, DType::F32)];
    let h = |v: f32| f32::from(f16::from_f32(v));
    let b = |v: f32| f32::from(bf16::from_f32(v));
    let mut misc = v4.clone();
    misc.extend([1.5, -2.25, 1.0, -2.0, 3.0, b(0.1), -3.0, 6.0, 10.0, h(0.1), 0.0, 1.0, -2.0, 0.5]);
    misc.extend([h(0.3), h(-0.7), h(1e-6), h(0.1), h(0.4), 1.0, h(0.1), b(-0.1)]);
    (Case { kernel, inputs: vec![], outputs, poison: 43981.0 }, vals, misc)
}

// Program-scope `constant` tables of half and bfloat, vectors, matrices, packed vectors and
// metal::array built with constructors, and constexpr half/bfloat/vector values: initialised at
// compile time, with the same round-to-nearest-even bits as the run-time conversions.
fn constant_data_is_initialised_at_compile_time_with_exact_rounding(device: Device) {
    let (case, vals, misc) = constants_case(&mut Rng::new(506));
    let out = case.run(device);
    let (hb, bb): (Vec<u16>, Vec<u16>) = (host(&out[0]), host(&out[1]));
    // Entry k of `constant` data, then of `constexpr` data (which every compiler must evaluate
    // at compile time; the host compiler may initialise the former at load time).
    for (k, &v) in vals.iter().chain(&vals).enumerate() {
        assert_eq!(hb[k], f16::from_f32(v).to_bits(), "half({v:e}) [{k}]: {:#06x}", hb[k]);
        assert_eq!(bb[k], bf16::from_f32(v).to_bits(), "bfloat({v:e}) [{k}]: {:#06x}", bb[k]);
    }
    assert_bits("constant vectors, matrices, packed, arrays", &host::<f32>(&out[2]), &misc);
}

const FUNCTION_CONSTANTS: &str = r#"
#include <metal_stdlib>
using namespace metal;
constant half fc_h [[function_constant(0)]];
constant bfloat fc_b [[function_constant(1)]];
constant float4 K4 = float4(float(fc_h), 1.0f, float(fc_b), 0.5f);
kernel void read_constants(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    o[i] = i == 0 ? float(fc_h) : i == 1 ? float(fc_b) : K4[i - 2];
}
"#;

fn function_constants_launch() -> LibraryLaunch {
    let mut launch = LibraryLaunch::new("read_constants", Dispatch::Threads([6, 1, 1]), [6, 1, 1]);
    launch.constants = vec![
        (ConstantKey::Index(0), ConstantValue::Float(0.1)),
        (ConstantKey::Name("fc_b".into()), ConstantValue::Float(-2.7)),
    ];
    launch
}

// half and bfloat function constants are constexpr values, usable in program-scope constants.
fn half_and_bfloat_function_constants_are_constant_expressions(device: Device) {
    let library = MetalLibrary::new("function_constants", FUNCTION_CONSTANTS);
    let args = vec![LibraryArg::Output { shape: vec![6], dtype: DType::F32, init_value: Some(f64::NAN) }];
    let out = library.dispatch(device, &args, &function_constants_launch()).unwrap();
    // Both roundings of the double agree for these values (direct, or through float).
    let (h, b) = (f32::from(f16::from_f64(0.1)), f32::from(bf16::from_f64(-2.7)));
    assert_eq!((h, b), (f32::from(f16::from_f32(0.1)), f32::from(bf16::from_f32(-2.7))));
    assert_bits("function constants", &host::<f32>(&out[0]), &[h, b, h, 1.0, b, 0.5]);
}

// Every kernel above compiles for CUDA with NVRTC alone (no GPU needed): in particular the
// program-scope constants are constant-initialised `__constant__` data.
#[test]
fn every_kernel_compiles_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let rng = &mut Rng::new(500);
    let mut programs: Vec<MetalProgram> = [
        packed_case(rng),
        matrix_case(rng),
        geometry_case(rng),
        postfix_case(rng),
        array_case(rng),
        constants_case(rng).0,
    ]
    .iter()
    .map(Case::program)
    .collect();
    programs.push(MetalLibrary::new("function_constants", FUNCTION_CONSTANTS).program(&function_constants_launch()));
    for program in &programs {
        let cubin = cuda::compile_cubin(program, (9, 0)).unwrap_or_else(|e| panic!("{}: {e}", program.kernel));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}

backend_tests!(
    packed_vectors_are_unpadded_and_behave_as_vectors,
    matrices_follow_metal_column_major_semantics,
    reflect_refract_faceforward_follow_their_definitions,
    postfix_increment_and_decrement_step_every_component,
    metal_array_works_in_every_address_space,
    constant_data_is_initialised_at_compile_time_with_exact_rounding,
    half_and_bfloat_function_constants_are_constant_expressions,
);
