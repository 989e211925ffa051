//! Memory the CPU emulator guards: threadgroup memory (declared arrays and `[[threadgroup(n)]]`
//! parameters) lies between guard ranges, so a kernel writing past it is an `Error::KernelFault`
//! naming the array and the process goes on; a row-contiguous copy too large to allocate is an
//! error, not an abort.

mod common;

use common::{assert_close, random_array, Rng};
use kiln::backend::Dispatch;
use kiln::{Array, DType, Device, Error, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};

#[test]
fn a_huge_broadcast_made_row_contiguous_is_an_error() {
    let mut rng = Rng::new(71);
    let x = random_array(&mut rng, DType::F32, &[1, 64]);
    let huge = x.broadcast_to(&[1 << 40, 64]).unwrap();
    match huge.to_contiguous_bytes() {
        Err(Error::InvalidArgument { op, msg }) => {
            assert_eq!(op, "to_contiguous_bytes");
            assert!(msg.contains(&format!("{} bytes", (1usize << 40) * 64 * 4)), "{msg}");
        }
        other => panic!("expected an allocation error, got {:?}", other.map(|b| b.len())),
    }
    // Through a kernel that asks for row-contiguous inputs (the default).
    let k = MetalKernel::new("huge_broadcast", &["x"], &["out"], "out[0] = x[0];").unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(Device::Cpu);
    match k.call(&[(&huge).into()], &spec) {
        Err(Error::InvalidArgument { op, msg }) => {
            assert_eq!(op, "to_row_contiguous");
            assert!(msg.contains("[1099511627776, 64]"), "{msg}");
        }
        other => panic!("expected an allocation error, got {other:?}"),
    }
    // A broadcast whose byte count overflows the address space is refused the same way.
    let overflow = x.broadcast_to(&[1 << 40, 1 << 40, 64]);
    if let Ok(a) = overflow {
        assert!(matches!(a.to_contiguous_bytes(), Err(Error::InvalidArgument { .. })));
    }
    // A strided view that fits is still copied element by element in row-major order.
    let t = random_array(&mut rng, DType::F32, &[5, 7]);
    let view = t.transpose(&[1, 0]).unwrap().slice(&[kiln::SliceArg { start: None, stop: None, step: -2 }]).unwrap();
    let src = t.to_f64_vec().unwrap();
    let want: Vec<f64> =
        (0..7).rev().step_by(2).flat_map(|j| (0..5).map(move |i| (i, j))).map(|(i, j)| src[i * 7 + j]).collect();
    assert_close("strided copy", &view.to_row_contiguous().unwrap(), &want, DType::F32);
}

/// Writes `buf[idx[0]] = buf[0]` from thread 0 of each group of an `n`-float threadgroup array,
/// then reads a neighbour's element: out = 2 * x[group + (t + 1) % n].
fn body_kernel(n: usize) -> MetalKernel {
    let src = format!(
        r#"
        threadgroup float buf[{n}];
        uint t = thread_index_in_threadgroup;
        buf[t] = x[thread_position_in_grid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (t == 0) {{ buf[idx[0]] = buf[0]; }}
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = buf[(t + 1) % {n}] * 2.0f;
    "#
    );
    MetalKernel::new(format!("tg_body_{n}"), &["x", "idx"], &["out"], src).unwrap()
}

const LIBRARY: &str = r#"
#include <metal_stdlib>
using namespace metal;

kernel void shift_scaled(device const float* x [[buffer(0)]],
                         device const int* idx [[buffer(1)]],
                         device float* out [[buffer(2)]],
                         threadgroup float* scratch [[threadgroup(0)]],
                         uint t [[thread_position_in_threadgroup]],
                         uint n [[threads_per_threadgroup]],
                         uint gid [[thread_position_in_grid]]) {
  scratch[t] = x[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) { scratch[idx[0]] = scratch[0]; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = scratch[(t + 1) % n] * 2.0f;
}

kernel void read_at(device const float* x [[buffer(0)]],
                    device const int* idx [[buffer(1)]],
                    device float* out [[buffer(2)]],
                    threadgroup float* scratch [[threadgroup(0)]],
                    uint t [[thread_position_in_threadgroup]],
                    uint gid [[thread_position_in_grid]]) {
  scratch[t] = x[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = t == 0 ? scratch[idx[0]] : scratch[t];
}
"#;

/// `[[threadgroup(0)]]` of `n` floats through a whole-file kernel.
fn library_call(function: &str, n: usize, x: &Array, idx: i32) -> kiln::Result<Vec<f64>> {
    let lib = MetalLibrary::new("tg_library", LIBRARY);
    let mut launch = LibraryLaunch::new(function, Dispatch::Threads([x.size() as u32, 1, 1]), [n as u32, 1, 1]);
    launch.threadgroup_memory = vec![n * 4];
    let args = [
        LibraryArg::Array(x.clone()),
        LibraryArg::Array(Array::from_vec(&[1], vec![idx]).unwrap()),
        LibraryArg::Output { shape: vec![x.size()], dtype: DType::F32, init_value: None },
    ];
    lib.dispatch(Device::Cpu, &args, &launch).map(|out| out[0].to_f64_vec().unwrap())
}

fn body_call(k: &MetalKernel, n: usize, x: &Array, idx: i32) -> kiln::Result<Vec<f64>> {
    let spec =
        LaunchSpec::new([x.size() as u32, 1, 1], [n as u32, 1, 1]).output(&[x.size()], DType::F32).device(Device::Cpu);
    let idx = Array::from_vec(&[1], vec![idx]).unwrap();
    k.call(&[x.into(), (&idx).into()], &spec).map(|out| out[0].to_f64_vec().unwrap())
}

/// out = 2 * x[group + (t + 1) % n] over groups of `n`.
fn shifted_reference(x: &[f64], n: usize) -> Vec<f64> {
    (0..x.len()).map(|i| 2.0 * x[i / n * n + (i % n + 1) % n]).collect()
}

#[track_caller]
fn expect_named_fault(result: kiln::Result<Vec<f64>>, kernel: &str, names: &[&str]) {
    match result {
        Err(Error::KernelFault { kernel: k, msg }) => {
            assert_eq!(k, kernel);
            for want in names {
                assert!(msg.contains(want), "{msg:?} lacks {want:?}");
            }
        }
        other => panic!("expected a kernel fault naming {names:?}, got {other:?}"),
    }
}

/// Indices past the end of an `n`-element float array: one element, 32 bytes, far (within the
/// guard), and before the start: one element, past a page.
fn bad_indices(n: usize) -> [(i32, &'static str); 5] {
    let n = n as i32;
    [
        (n, "past the end"),
        (n + 8, "past the end"),
        (n + 200_000, "past the end"),
        (-1, "before the start"),
        (-5000, "before the start"),
    ]
}

fn body_writes_are_faults(checked: bool) {
    let mut rng = Rng::new(72 + checked as u64);
    // 64 floats end on the guard; 63 leave 4 bytes of canaries after the data.
    for n in [64usize, 63] {
        let k = body_kernel(n);
        let x = random_array(&mut rng, DType::F32, &[4 * n]);
        let want = shifted_reference(&x.to_f64_vec().unwrap(), n);
        let _scope = checked.then(kiln::backend::cpu::CheckedScope::enter);
        for (idx, side) in bad_indices(n) {
            expect_named_fault(body_call(&k, n, &x, idx), &format!("tg_body_{n}"), &["threadgroup array `buf`", side]);
            // The same kernel, in bounds, runs correctly afterwards.
            let got = body_call(&k, n, &x, 0).unwrap();
            assert_close("after a fault", &Array::from_f64(DType::F32, &[4 * n], &got).unwrap(), &want, DType::F32);
        }
    }
}

#[test]
fn threadgroup_array_writes_out_of_bounds_are_faults_naming_the_array() {
    body_writes_are_faults(false);
}

#[test]
fn threadgroup_array_writes_out_of_bounds_are_faults_naming_the_array_when_checked() {
    body_writes_are_faults(true);
}

fn parameter_writes_are_faults(checked: bool) {
    let mut rng = Rng::new(74 + checked as u64);
    for n in [64usize, 60] {
        let x = random_array(&mut rng, DType::F32, &[4 * n]);
        let want = shifted_reference(&x.to_f64_vec().unwrap(), n);
        let _scope = checked.then(kiln::backend::cpu::CheckedScope::enter);
        for (idx, side) in bad_indices(n) {
            expect_named_fault(
                library_call("shift_scaled", n, &x, idx),
                "tg_library:shift_scaled",
                &["threadgroup memory `scratch` ([[threadgroup(0)]]", side],
            );
            let got = library_call("shift_scaled", n, &x, 0).unwrap();
            assert_close("after a fault", &Array::from_f64(DType::F32, &[4 * n], &got).unwrap(), &want, DType::F32);
        }
    }
}

#[test]
fn threadgroup_parameter_writes_out_of_bounds_are_faults_naming_the_parameter() {
    parameter_writes_are_faults(false);
}

#[test]
fn threadgroup_parameter_writes_out_of_bounds_are_faults_naming_the_parameter_when_checked() {
    parameter_writes_are_faults(true);
}

#[test]
fn a_read_one_past_threadgroup_memory_is_a_fault_only_when_checked() {
    let mut rng = Rng::new(76);
    let n = 64;
    let x = random_array(&mut rng, DType::F32, &[2 * n]);
    let xs = x.to_f64_vec().unwrap();
    // Unchecked, as on a GPU, the read goes unnoticed (it sees the guard's zeros).
    let got = library_call("read_at", n, &x, n as i32).unwrap();
    for (i, (&g, &v)) in got.iter().zip(&xs).enumerate() {
        if i % n != 0 {
            assert_eq!(g, v, "element {i}");
        }
    }
    let _scope = kiln::backend::cpu::CheckedScope::enter();
    // Both threadgroups read past the end; they run in parallel, so either may fault first.
    let first = |t: usize| format!("thread ({t}, 0, 0) made an out-of-bounds access to threadgroup memory `scratch`");
    match library_call("read_at", n, &x, n as i32) {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, "tg_library:read_at");
            assert!(msg.contains(&first(0)) || msg.contains(&first(n)), "{msg:?} names neither group's thread 0");
            assert!(msg.contains("byte 0 past the end"), "{msg:?}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    let got = library_call("read_at", n, &x, 1).unwrap();
    let want: Vec<f64> = (0..2 * n).map(|i| if i % n == 0 { xs[i + 1] } else { xs[i] }).collect();
    assert_eq!(got, want);
}

#[test]
fn kernels_whose_arrays_share_a_region_in_turn_run_cleanly() {
    // Regions are reused across launches: a 4-float array fills what a 2-float array leaves to
    // canaries (both round to 16 bytes), so each launch must lay its own canaries.
    let mut rng = Rng::new(77);
    let kernels = [(body_kernel(4), 4usize), (body_kernel(2), 2)];
    for round in 0..20 {
        let (k, n) = &kernels[round % 2];
        let x = random_array(&mut rng, DType::F32, &[*n]);
        let want = shifted_reference(&x.to_f64_vec().unwrap(), *n);
        let got = body_call(k, *n, &x, 0).unwrap();
        assert_close("in bounds", &Array::from_f64(DType::F32, &[*n], &got).unwrap(), &want, DType::F32);
    }
}
