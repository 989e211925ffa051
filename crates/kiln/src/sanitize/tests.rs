use super::*;
use crate::{Array, DType, LaunchSpec, MetalKernel};

fn run_check(body: &str, grid: u32, tg: u32, n: usize) -> Vec<Finding> {
    let kernel = MetalKernel::new("k", &["inp"], &["out"], body).unwrap();
    let a = Array::from_f64(DType::F32, &[n], &(0..n).map(|i| i as f64 * 0.5 + 1.0).collect::<Vec<_>>()).unwrap();
    let spec = LaunchSpec::new([grid, 1, 1], [tg, 1, 1]).output(&[n], DType::F32);
    let (r, found) = check(|| kernel.call(&[(&a).into()], &spec));
    r.unwrap();
    for f in &found {
        eprintln!("{}", f.render());
    }
    found
}

#[test]
fn a_cross_simd_exchange_without_a_barrier_is_a_race_on_both_lines() {
    let found = run_check(
        "uint i = thread_position_in_threadgroup.x;\n\
         threadgroup float tg[64];\n\
         tg[i] = inp[i];\n\
         threadgroup_barrier(mem_flags::mem_threadgroup);\n\
         float partner = tg[63 - i];\n\
         tg[i] = partner * 2.0f;\n\
         threadgroup_barrier(mem_flags::mem_threadgroup);\n\
         out[i] = tg[i];",
        64,
        64,
        64,
    );
    assert!(found.iter().any(|f| f.kind == "race" && f.severity == Severity::Error));
}
