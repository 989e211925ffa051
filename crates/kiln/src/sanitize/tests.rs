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
    let races: Vec<&Finding> = found.iter().filter(|f| f.kind == "race" && f.severity == Severity::Error).collect();
    assert!(!races.is_empty());
    for f in races {
        let mut lines: Vec<u32> = f.line.iter().chain(&f.other_line).map(|l| l.line).collect();
        lines.sort_unstable();
        assert_eq!(lines, [5, 6], "{}", f.render());
        assert_eq!(f.line.as_ref().unwrap().line, 5, "the read is the finding's line: {}", f.render());
        assert_eq!(f.buffer.as_deref(), Some("tg"));
    }
}

fn program_of(body: &str, header: &str) -> crate::backend::MetalProgram {
    let kernel = MetalKernel::new("k", &["inp"], &["out"], body).unwrap().header(header);
    let a = Array::from_f64(DType::F32, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
    kernel.program(&kernel.generate(&[a], &spec).unwrap())
}

#[test]
fn compiler_messages_name_the_users_line_on_both_backends() {
    let program = program_of("uint i = thread_position_in_grid.x;\nout[i] = inp[i] + tm;", "// helper\n");
    let lines = UserLines::of(&program);
    let generated = (1..=program.source.lines().count() as u32)
        .find(|&l| lines.map(l).is_some_and(|u| u.part == "body" && u.line == 2))
        .unwrap();
    let file = lines.file_name().to_string();
    let host = format!("{file}:{generated}:22: error: 'tm' was not declared in this scope; did you mean 'tm'?");
    let mapped = user_compile_log(&program, &host);
    assert!(mapped.starts_with("body line 2, column 22: error: 'tm' was not declared in this scope\n"), "{mapped}");
    assert!(mapped.contains("out[i] = inp[i] + tm;\n"), "{mapped}");
    assert!(!mapped.contains("did you mean"), "{mapped}");
    let nvrtc = format!("k({generated}): error: identifier \"tm\" is undefined");
    let mapped = user_compile_log(&program, &nvrtc);
    assert!(mapped.starts_with("body line 2: error: identifier \"tm\" is undefined"), "{mapped}");
    let header = user_compile_log(&program, &format!("{file}:1:1: error: stray"));
    assert!(header.starts_with("header line 1, column 1: error: stray"), "{header}");
}

#[test]
fn a_compile_error_from_the_cpu_backend_points_at_the_body() {
    let kernel =
        MetalKernel::new("bad", &["inp"], &["out"], "uint i = thread_position_in_grid.x;\n\nout[i] = nope[i];")
            .unwrap();
    let a = Array::from_f64(DType::F32, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
    let err = kernel.call(&[(&a).into()], &spec).unwrap_err().to_string();
    assert!(err.contains("body line 3, column 10: error:"), "{err}");
    assert!(err.contains("out[i] = nope[i];"), "{err}");
}
