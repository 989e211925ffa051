//! `kiln check` end to end: the JSON findings, and the exit status (0 clean, 2 errors, 1 could
//! not run).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln")
}

fn catalogue(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln/tests/sanitizer_catalogue").join(format!("{name}.toml"))
}

#[test]
fn a_race_exits_2_with_json_naming_kind_line_and_buffer() {
    let out = kiln(&["check", catalogue("cross_simd_exchange").to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let races: Vec<&serde_json::Value> = found.as_array().unwrap().iter().filter(|f| f["kind"] == "race").collect();
    assert!(!races.is_empty(), "{found}");
    for f in races {
        assert_eq!(f["severity"], "error");
        assert_eq!(f["kernel"], "cross_simd_exchange");
        assert_eq!(f["line"], 5);
        assert_eq!(f["lines"], serde_json::json!([5, 6]));
        assert_eq!(f["buffer"], "slot");
        assert!(f["text"].as_str().unwrap().contains("float partner = slot[63 - i];"));
        for key in ["threads", "index", "count"] {
            assert!(!f[key].is_null(), "{key}: {f}");
        }
    }
}

#[test]
fn warnings_alone_exit_0_and_a_kernel_that_cannot_compile_exits_1() {
    let out = kiln(&["check", catalogue("load_then_select").to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(found.as_array().unwrap().iter().all(|f| f["severity"] == "warning"), "{found}");
    assert!(!found.as_array().unwrap().is_empty());
    let dir = std::env::temp_dir().join(format!("kiln-check-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("broken.toml");
    std::fs::write(
        &spec,
        "[kernel]\nname = \"broken\"\ninput_names = [\"inp\"]\noutput_names = [\"out\"]\n\
         source = '''\nuint i = thread_position_in_grid.x;\nout[i] = nope;\n'''\n\n[call]\ngrid = [4, 1, 1]\n\
         threadgroup = [4, 1, 1]\noutput_shapes = [[4]]\noutput_dtypes = [\"float32\"]\n\n[[input]]\nscalar = 1.0\n",
    )
    .unwrap();
    let out = kiln(&["check", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("body line 2, column 10: error:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
