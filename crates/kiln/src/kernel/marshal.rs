//! One call's inputs and outputs as the bindings of one launch, for `MetalKernel` and
//! `CudaKernel` alike. MLX's two contracts agree on the order (each array input, then its shape,
//! strides and rank where the body names them, then the outputs) and differ only in how a
//! scalar and a shape travel, which [`Convention`] says.

use super::launch::{KernelInput, LaunchSpec};
use crate::array::Array;
use crate::backend::{Backend, Binding, ConstBytes, OutputSpec};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::program::MAX_NDIM;
use crate::source::scan::ShapeInfo;

/// How a kernel family receives what is not an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Convention {
    /// `mx.fast.metal_kernel`: a scalar (or 0-d host array) is `constant T&`, bound as bytes;
    /// a shape or strides is a buffer of the input's rank.
    Metal,
    /// `mx.fast.cuda_kernel`: every input is a device pointer; a shape or strides is a
    /// `Shape`/`Strides` value of [`MAX_NDIM`] entries, zero past the input's rank.
    Cuda,
}

/// What the marshalling of one call needs to know of its kernel and launch.
pub(crate) struct Marshal<'a> {
    /// The op named in errors.
    pub op: &'a str,
    /// The launch device.
    pub device: Device,
    /// The backend of `device`.
    pub backend: &'a dyn Backend,
    /// Per input name, what of its shape the body names.
    pub shape_info: &'a [ShapeInfo],
    /// Copy non-row-contiguous inputs first.
    pub ensure_row_contiguous: bool,
    /// How scalars and shapes travel.
    pub convention: Convention,
}

/// A 0-d array in host memory: bound as constant bytes on every backend, like a scalar.
pub(crate) fn is_host_scalar(a: &Array) -> bool {
    a.ndim() == 0 && a.host_buffer().is_some()
}

impl Marshal<'_> {
    /// The bindings of a call of `inputs` (with `arrays`, the same inputs as arrays) and
    /// `spec`'s outputs, in slot order.
    pub(crate) fn bindings(
        &self,
        inputs: &[KernelInput],
        arrays: impl IntoIterator<Item = Array>,
        spec: &LaunchSpec,
    ) -> Result<Vec<Binding>> {
        let mut bindings = Vec::with_capacity(inputs.len() + spec.output_shapes.len());
        for ((mut array, input), info) in arrays.into_iter().zip(inputs).zip(self.shape_info) {
            let scalar = !matches!(input, KernelInput::Array(_)) || is_host_scalar(&array);
            if self.convention == Convention::Metal && scalar {
                // A scalar (0-d, `constant` space, no shape bindings) travels with the launch as
                // constant bytes: no device allocation and no copy queued before the kernel.
                bindings.push(Binding::Bytes(array.to_contiguous_bytes()?.into()));
                continue;
            }
            if array.device() != self.device {
                array = self.backend.upload(&array)?;
            }
            if self.ensure_row_contiguous && !array.is_row_contiguous() {
                array = self.backend.row_contiguous(&array)?;
            }
            let info = if array.ndim() == 0 { ShapeInfo::default() } else { *info };
            let axes = match self.convention {
                Convention::Metal => array.ndim(),
                Convention::Cuda => MAX_NDIM,
            };
            let shape = info.shape.then(|| axis_bytes(array.shape().iter().map(|&n| (n as i32).to_le_bytes()), axes));
            let strides =
                info.strides.then(|| axis_bytes(array.strides().iter().map(|&s| (s as i64).to_le_bytes()), axes));
            let ndim = array.ndim() as i32;
            bindings.push(Binding::Array(array));
            bindings.extend(shape.map(Binding::Bytes));
            bindings.extend(strides.map(Binding::Bytes));
            if info.ndim {
                bindings.push(Binding::Bytes(ndim.to_le_bytes().as_slice().into()));
            }
        }
        for (k, (shape, &dtype)) in spec.output_shapes.iter().zip(&spec.output_dtypes).enumerate() {
            match spec.outputs_into.as_ref().and_then(|given| given.get(k)?.as_ref()) {
                Some(out) if out.device() != self.device => {
                    return Err(Error::invalid(
                        self.op,
                        format!("an output lives on {} but the kernel runs on {}", out.device(), self.device),
                    ));
                }
                Some(out) => bindings.push(Binding::OutputInto(out.clone())),
                None => bindings.push(Binding::Output(OutputSpec {
                    shape: shape.as_slice().into(),
                    dtype,
                    init_value: spec.init_value,
                })),
            }
        }
        Ok(bindings)
    }
}

/// `axes` values' bytes (fewer values are followed by zeros, more are cut).
fn axis_bytes<const N: usize>(values: impl Iterator<Item = [u8; N]>, axes: usize) -> ConstBytes {
    let mut bytes: ConstBytes = values.take(axes).flatten().collect();
    bytes.resize(axes * N, 0);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn marshal(convention: Convention, backend: &dyn Backend) -> Marshal<'_> {
        const INFO: [ShapeInfo; 2] = [ShapeInfo { shape: true, strides: true, ndim: true }; 2];
        Marshal { op: "t", device: Device::Cpu, backend, shape_info: &INFO, ensure_row_contiguous: true, convention }
    }

    fn bytes(b: &Binding) -> &[u8] {
        match b {
            Binding::Bytes(b) => b,
            other => panic!("expected bytes, got {other:?}"),
        }
    }

    #[test]
    fn metal_and_cuda_pass_shapes_their_own_way() {
        let backend = crate::backend::cpu::CpuBackend::default();
        let a = Array::from_vec(&[2, 3], vec![1.5f32, -2.0, 3.25, 4.0, 0.5, 7.0]).unwrap();
        let inputs = [KernelInput::Array(a.clone()), KernelInput::Float(2.5)];
        let spec = LaunchSpec::new([6, 1, 1], [6, 1, 1]).output(&[6], DType::F32).init_value(1.0);
        let arrays = || inputs.iter().map(KernelInput::to_array);

        let metal = marshal(Convention::Metal, &backend).bindings(&inputs, arrays(), &spec).unwrap();
        assert_eq!(metal.len(), 6, "{metal:?}");
        assert!(matches!(&metal[0], Binding::Array(x) if x.shape() == [2, 3]));
        assert_eq!(bytes(&metal[1]), [2i32, 3].map(i32::to_le_bytes).concat());
        assert_eq!(bytes(&metal[2]), [3i64, 1].map(i64::to_le_bytes).concat());
        assert_eq!(bytes(&metal[3]), 2i32.to_le_bytes());
        assert_eq!(bytes(&metal[4]), 2.5f32.to_le_bytes(), "a scalar travels as bytes");
        assert!(matches!(&metal[5], Binding::Output(o) if o.shape.as_slice() == [6] && o.init_value == Some(1.0)));

        let cuda = marshal(Convention::Cuda, &backend).bindings(&inputs, arrays(), &spec).unwrap();
        assert_eq!(cuda.len(), 6, "{cuda:?}");
        let mut shape = [2i32, 3].map(i32::to_le_bytes).concat();
        shape.resize(4 * MAX_NDIM, 0);
        let mut strides = [3i64, 1].map(i64::to_le_bytes).concat();
        strides.resize(8 * MAX_NDIM, 0);
        assert_eq!(bytes(&cuda[1]), shape, "CUDA's Shape holds MAX_NDIM entries");
        assert_eq!(bytes(&cuda[2]), strides);
        assert_eq!(bytes(&cuda[3]), 2i32.to_le_bytes());
        assert!(matches!(&cuda[4], Binding::Array(x) if x.ndim() == 0), "a scalar is a pointer in CUDA");
    }

    #[test]
    fn outputs_given_by_the_caller_are_bound_in_place() {
        let backend = crate::backend::cpu::CpuBackend::default();
        let out = Array::from_vec(&[4], vec![0.0f32; 4]).unwrap();
        let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).outputs_into(vec![out]);
        for convention in [Convention::Metal, Convention::Cuda] {
            let b = marshal(convention, &backend).bindings(&[], std::iter::empty(), &spec).unwrap();
            assert!(matches!(b.as_slice(), [Binding::OutputInto(x)] if x.shape() == [4]), "{b:?}");
        }
    }
}
