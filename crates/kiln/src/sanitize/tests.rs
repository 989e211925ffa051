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

#[test]
fn findings_in_an_included_header_and_after_it_name_their_files_lines() {
    use crate::{Device, LibraryArg, LibraryLaunch, MetalLibrary};
    let dir = std::env::temp_dir().join(format!("kiln-sanitize-include-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("stage.h"),
        "// stores each thread's value\ninline void stage(threadgroup float* s, uint i, float v) {\n  s[i] = v;\n}\n",
    )
    .unwrap();
    let main = "#include <metal_stdlib>\n#include \"stage.h\"\nusing namespace metal;\n\n\
                kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n\
                uint i [[thread_index_in_threadgroup]]) {\n  threadgroup float s[64];\n  stage(s, i, x[i]);\n\
                \x20 y[i] = s[(i + 33) % 64];\n}\n";
    std::fs::write(dir.join("k.metal"), main).unwrap();
    let lib = MetalLibrary::from_file(dir.join("k.metal")).unwrap();
    let x = Array::from_f64(DType::F32, &[64], &(0..64).map(|i| i as f64 + 0.5).collect::<Vec<_>>()).unwrap();
    let args = [LibraryArg::Array(x), LibraryArg::Output { shape: vec![64], dtype: DType::F32, init_value: None }];
    let (r, found) = check(|| lib.dispatch(Device::Cpu, &args, &LibraryLaunch::threads("k", 64usize, 64usize)));
    r.unwrap();
    let race = found.iter().find(|f| f.kind == "race" && f.severity == Severity::Error).unwrap();
    let (read, write) = (race.line.as_ref().unwrap(), race.other_line.as_ref().unwrap());
    assert_eq!((read.part, read.file.as_deref(), read.line), ("source", None, 9), "{}", race.render());
    assert_eq!(
        (write.file.as_deref(), write.line, write.text.trim()),
        (Some("stage.h"), 3, "s[i] = v;"),
        "{}",
        race.render()
    );
    assert!(race.render().contains("stage.h line 3 |"), "{}", race.render());
    std::fs::remove_dir_all(&dir).ok();
}
