//! Kernel libraries linked with the scheduler object (`scheduler_object`) behave as those with
//! the scheduler compiled inline, and a damaged object in the cache is built again.

use super::compile::{linked_with_scheduler_object_on_this_thread, with_shortcuts, Shortcuts};
use super::scheduler_object::{self, object_dir, object_key};
use super::toolchain::{flags, host_compiler};
use crate::backend::cpu::emit::prelude;
use crate::backend::disk_cache;
use crate::check::Rng;
use crate::config;
use crate::program::{MathMode, ProgramKind};
use crate::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

fn nonce() -> u128 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.as_nanos() ^ (u128::from(std::process::id()) << 64)
}

/// Calls a kernel of `body` (made new text by a comment) built with `shortcuts`; the outputs
/// or the error, and whether the library was linked with the scheduler object.
fn run(
    shortcuts: Shortcuts,
    body: &str,
    input: &Array,
    spec: &LaunchSpec,
) -> (std::result::Result<Vec<f64>, Error>, bool) {
    let text = format!("{body}// {}\n", nonce());
    let k = MetalKernel::new("cpu_scheduler_object", &["inp"], &["out"], text).unwrap();
    let before = linked_with_scheduler_object_on_this_thread();
    let out = with_shortcuts(shortcuts, || k.call(&[input.into()], spec));
    let linked = linked_with_scheduler_object_on_this_thread() > before;
    (out.map(|o| o[0].to_f64_vec().unwrap()), linked)
}

#[test]
fn kernels_linked_with_the_scheduler_object_agree_with_inline_ones() {
    let n = 512usize;
    let mut rng = Rng::new(0x5c4e);
    let x: Vec<f32> = rng.uniforms(n, -3.0, 3.0).into_iter().map(|v| v as f32).collect();
    let input = Array::from_vec(&[n], x.clone()).unwrap();

    // Threads as a plain loop.
    let exp = "uint i = thread_position_in_grid.x;\nout[i] = metal::exp(inp[i]);\n";
    let spec = LaunchSpec::new([n as u32, 1, 1], [64, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    let want: Vec<f64> = x.iter().map(|&v| (v as f64).exp()).collect();
    let (linked, with) = run(Shortcuts::ALL, exp, &input, &spec);
    let (inline, without) = run(Shortcuts::NONE, exp, &input, &spec);
    assert!(with && !without, "one library linked with the object, the other not");
    let (linked, inline) = (linked.unwrap(), inline.unwrap());
    assert_eq!(linked, inline);
    for (i, (&g, &w)) in linked.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 4e-7 * w.abs(), "exp: out[{i}] = {g}, want {w}");
    }

    // Fibers: SIMD collectives, threadgroup memory and a barrier, over partial edge groups.
    let reduce = "threadgroup float part[8];\n\
                  float v = simd_sum(inp[thread_position_in_grid.x]);\n\
                  if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = v;\n\
                  threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                  if (thread_index_in_threadgroup == 0) {\n  float s = 0;\n\
                  for (uint k = 0; k < simdgroups_per_threadgroup; k++) s += part[k];\n\
                  out[threadgroup_position_in_grid.x] = s;\n}\n";
    let rows = 480usize;
    let groups = rows.div_ceil(256);
    let spec = LaunchSpec::new([rows as u32, 1, 1], [256, 1, 1]).output(&[groups], DType::F32).device(Device::Cpu);
    let (linked, with) = run(Shortcuts::ALL, reduce, &input, &spec);
    let (inline, without) = run(Shortcuts::NONE, reduce, &input, &spec);
    assert!(with && !without);
    let (linked, inline) = (linked.unwrap(), inline.unwrap());
    assert_eq!(linked, inline);
    for (g, got) in linked.iter().enumerate() {
        let want: f64 = x[g * 256..rows.min(g * 256 + 256)].iter().map(|&v| v as f64).sum();
        assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "reduce: group {g}: {got}, want {want}");
    }

    // A fault inside a fiber: the scheduler's handler names the thread either way.
    let fault = "uint i = thread_position_in_grid.x;\nfloat v = simd_sum(inp[i]);\n\
                 if (i == 37) { device float* far = out + (1ul << 40); far[0] = v; }\nout[i] = v;\n";
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    let (linked, with) = run(Shortcuts::ALL, fault, &input, &spec);
    let (inline, without) = run(Shortcuts::NONE, fault, &input, &spec);
    assert!(with && !without);
    match (linked, inline) {
        (Err(Error::KernelFault { msg: a, .. }), Err(Error::KernelFault { msg: b, .. })) => {
            assert!(a.starts_with("thread (37, 0, 0)"), "{a}");
            assert_eq!(a.split(" accessed").next(), b.split(" accessed").next());
        }
        other => panic!("expected two kernel faults, got {other:?}"),
    }
}

#[test]
fn a_damaged_scheduler_object_is_built_again() {
    let cxx = config::host_cxx();
    let compiler = host_compiler(&cxx).unwrap();
    let flags = flags(MathMode::Safe, &compiler);
    let text = prelude(ProgramKind::MlxBody);
    let dir = object_dir(&object_key(&cxx, &compiler, &flags, text));
    let object = dir.join("scheduler.o");
    let n = 96usize;
    let mut rng = Rng::new(0x5c4f);
    let x: Vec<f32> = rng.uniforms(n, -2.0, 2.0).into_iter().map(|v| v as f32).collect();
    let input = Array::from_vec(&[n], x.clone()).unwrap();
    let body = "uint i = thread_position_in_grid.x;\nout[i] = simd_max(inp[i]) + inp[i];\n";
    let spec = LaunchSpec::new([n as u32, 1, 1], [32, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    let check = |what: &str| {
        let (out, linked) = run(Shortcuts::ALL, body, &input, &spec);
        assert!(linked, "{what}: linked with the scheduler object");
        for (i, &g) in out.unwrap().iter().enumerate() {
            let lanes = &x[i / 32 * 32..i / 32 * 32 + 32];
            let want = lanes.iter().fold(f32::MIN, |m, &v| m.max(v)) + x[i];
            assert_eq!(g, want as f64, "{what}: out[{i}]");
        }
    };
    check("first build");
    let good = std::fs::read(&object).unwrap();
    let damage: [(&str, &dyn Fn()); 4] = [
        ("truncated", &|| std::fs::write(&object, &good[..good.len() / 2]).unwrap()),
        ("code overwritten", &|| {
            let mut bytes = good.clone();
            let at = bytes.len() / 3;
            bytes[at..at + 256].fill(0xCC);
            std::fs::write(&object, &bytes).unwrap();
        }),
        ("no manifest", &|| std::fs::remove_file(disk_cache::manifest_path(&object)).unwrap()),
        ("linker record garbage", &|| std::fs::write(dir.join("linker"), b"nonsense").unwrap()),
    ];
    for (what, damage) in damage {
        damage();
        // A new process: nothing known in memory.
        scheduler_object::forget();
        check(what);
        let rebuilt = disk_cache::load_verified(&object, &object_key(&cxx, &compiler, &flags, text));
        assert!(rebuilt.is_some(), "{what}: the entry was built again and checks out");
    }
}
