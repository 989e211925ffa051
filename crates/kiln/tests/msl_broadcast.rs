//! Scalar arguments of Metal's vector math functions, on every backend: Metal broadcasts a
//! scalar wherever a vector argument is expected (`pow(c.rgb, gamma)`, `step(0.0, v)`,
//! `fma(v, 0.5f, w)`, `smoothstep(0.0f, 1.0f, v)`), for float and half vectors alike. Each form
//! must give, bit for bit, what the same call with the scalar written as a vector gives; the
//! forms whose result is exactly representable are also checked against f64 references.

mod common;

use common::Rng;
use kiln::backend::cuda;
use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

const THREADS: usize = 64;

/// An f64 reference of a form whose result is exact, or one rounding away, in f32, from the
/// elements of `v` and `w`.
type Reference = Option<fn(f64, f64) -> f64>;

/// (expression with scalar arguments, the same with every scalar written as a vector, its
/// reference where it has one).
const FORMS: [(&str, &str, Reference); 19] = [
    ("step(0.0, v)", "step(float4(0.0f), v)", Some(|v, _| (v >= 0.0) as u8 as f64)),
    ("step(v, 0.25f)", "step(v, float4(0.25f))", Some(|v, _| (0.25 >= v) as u8 as f64)),
    ("smoothstep(-1.0f, 1.0f, v)", "smoothstep(float4(-1.0f), float4(1.0f), v)", None),
    ("smoothstep(w, 1.5f, v)", "smoothstep(w, float4(1.5f), v)", None),
    ("fmax(v, 0.0f)", "fmax(v, float4(0.0f))", Some(|v, _| v.max(0.0))),
    ("fmin(0.5f, v)", "fmin(float4(0.5f), v)", Some(|v, _| v.min(0.5))),
    ("min(0.5f, v)", "min(float4(0.5f), v)", Some(|v, _| v.min(0.5))),
    ("clamp(v, w, 1.0f)", "clamp(v, w, float4(1.0f))", Some(|v, w| v.max(w).min(1.0))),
    ("clamp(v, -0.5f, 0.5f)", "clamp(v, float4(-0.5f), float4(0.5f))", Some(|v, _| v.clamp(-0.5, 0.5))),
    ("pow(abs(v), 2.5f)", "pow(abs(v), float4(2.5f))", None),
    ("float4(pow(abs(v).xyz, 0.5f), 1.0f)", "float4(pow(abs(v).xyz, float3(0.5f)), 1.0f)", None),
    ("fma(v, 0.5f, v)", "fma(v, float4(0.5f), v)", Some(|v, _| v * 1.5)),
    ("fma(2.0f, v, 1.0f)", "fma(float4(2.0f), v, float4(1.0f))", None),
    ("copysign(1.0f, v)", "copysign(float4(1.0f), v)", Some(|v, _| 1.0f64.copysign(v))),
    ("atan2(v, 1.0f)", "atan2(v, float4(1.0f))", None),
    ("fmod(v, 0.75f)", "fmod(v, float4(0.75f))", Some(|v, _| v % 0.75)),
    ("fdim(v, 0.5f)", "fdim(v, float4(0.5f))", None),
    ("fmax3(v, 0.0f, w)", "fmax3(v, float4(0.0f), w)", Some(|v, w| v.max(0.0).max(w))),
    ("float4(fma(half4(v), 0.5h, half4(w)))", "float4(fma(half4(v), half4(0.5h), half4(w)))", None),
];

fn source() -> String {
    let mut s = String::from(
        "    uint i = thread_position_in_grid.x;\n    \
         float4 v = float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);\n    \
         float4 w = float4(y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3]);\n    \
         float4 r;\n",
    );
    for (k, (scalar, vector, _)) in FORMS.iter().enumerate() {
        for (out, expr) in [("b", scalar), ("e", vector)] {
            s.push_str(&format!(
                "    r = {expr};\n    for (uint c = 0; c < 4; ++c) {{ {out}[({k} * {THREADS} + i) * 4 + c] = r[c]; }}\n"
            ));
        }
    }
    s
}

fn kernel() -> MetalKernel {
    MetalKernel::new("scalar_broadcast", &["x", "y"], &["b", "e"], source()).unwrap()
}

fn spec(device: Device) -> LaunchSpec {
    let n = FORMS.len() * THREADS * 4;
    let t = THREADS as u32;
    LaunchSpec::new([t, 1, 1], [t, 1, 1])
        .output(&[n], DType::F32)
        .output(&[n], DType::F32)
        .init_value(f64::NAN)
        .device(device)
}

fn inputs(rng: &mut Rng) -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = rng.normals(THREADS * 4, 1.5).into_iter().map(|v| v as f32).collect();
    let y: Vec<f32> = rng.uniforms(THREADS * 4, -1.0, 0.5).into_iter().map(|v| v as f32).collect();
    (x, y)
}

fn scalar_arguments_broadcast_like_vectors(device: Device) {
    let rng = &mut Rng::new(71);
    let (x, y) = inputs(rng);
    let xa = Array::from_vec(&[x.len()], x.clone()).unwrap().to_device(device).unwrap();
    let ya = Array::from_vec(&[y.len()], y.clone()).unwrap().to_device(device).unwrap();
    let out = kernel().call(&[(&xa).into(), (&ya).into()], &spec(device)).unwrap();
    let b = out[0].to_host().unwrap().to_vec::<f32>().unwrap();
    let e = out[1].to_host().unwrap().to_vec::<f32>().unwrap();
    let mut bad = Vec::new();
    for (k, (scalar, vector, reference)) in FORMS.iter().enumerate() {
        for j in 0..THREADS * 4 {
            let (got, want) = (b[k * THREADS * 4 + j], e[k * THREADS * 4 + j]);
            if got.is_nan() || got.to_bits() != want.to_bits() {
                bad.push(format!("{scalar} [{j}]: {got} against {want} from {vector}"));
            }
            if let Some(r) = reference.map(|f| f(x[j] as f64, y[j] as f64)) {
                if got != r as f32 {
                    bad.push(format!("{scalar} [{j}]: {got}, reference {r}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} wrong, first: {:?}", bad.len(), &bad[..bad.len().min(5)]);
}

#[test]
fn broadcast_forms_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let kernel = kernel();
    let mut rng = Rng::new(72);
    let (x, y) = inputs(&mut rng);
    let args = [Array::from_vec(&[x.len()], x).unwrap(), Array::from_vec(&[y.len()], y).unwrap()];
    let program = kernel.program(&kernel.generate(&args, &spec(Device::Cpu)).unwrap());
    let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&cubin[..4], b"\x7fELF", "not a cubin");
}

backend_tests!(scalar_arguments_broadcast_like_vectors);
