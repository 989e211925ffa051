//! Memory the CPU emulator guards: threadgroup memory (declared arrays and `[[threadgroup(n)]]`
//! parameters) lies between guard ranges, so a kernel writing past it is an `Error::KernelFault`
//! naming the array and the process goes on; a row-contiguous copy too large to allocate is an
//! error, not an abort.

mod common;

use common::{assert_close, random_array, Rng};
use kiln::{DType, Device, Error, LaunchSpec, MetalKernel};

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
