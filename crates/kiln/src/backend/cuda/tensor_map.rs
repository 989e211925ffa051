//! Tensor maps: the 128-byte descriptors the Hopper tensor memory accelerator (TMA) copies tiles
//! with (`cp.async.bulk.tensor`). A kernel reads them from device memory, so an op encodes them
//! on the host for the arrays it passes and uploads them beside its other inputs.

use cudarc::driver::sys;

use super::CudaBackend;
use crate::array::Array;
use crate::backend::TENSOR_MAP_BYTES;
use crate::device::Device;
use crate::error::{Error, Result};

impl CudaBackend {
    /// The tensor map of a row-contiguous 16-bit array of this device viewed as a 3-D tensor of
    /// `dims` (innermost first: `dims[0]` elements per row, `dims[1]` rows per matrix, `dims[2]`
    /// matrices), copied in boxes of `tile` elements, with the 128-byte shared-memory swizzle
    /// (`tile[0]` must span 128 bytes or less) and zeros for elements outside `dims`.
    pub(super) fn encode_tensor_map_16bit(
        &self,
        what: &str,
        array: &Array,
        dims: [u64; 3],
        tile: [u32; 3],
    ) -> Result<[u8; TENSOR_MAP_BYTES]> {
        if array.device() != Device::Cuda(self.ordinal) || !array.is_row_contiguous() {
            return Err(Error::invalid(
                what,
                format!(
                    "a tensor map needs a row-contiguous array on cuda:{}, got one on {}",
                    self.ordinal,
                    array.device()
                ),
            ));
        }
        if array.dtype().size() != 2 {
            return Err(Error::UnsupportedDType {
                op: what.to_string(),
                dtype: array.dtype().to_string(),
                msg: "a 16-bit tensor map describes 2-byte elements".into(),
            });
        }
        let count = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if count != Some(array.size() as u64) || dims.contains(&0) {
            return Err(Error::shape(
                what,
                format!("tensor map dims {dims:?} do not cover the {} elements of the array", array.size()),
            ));
        }
        if tile[0] == 0 || tile[0] * 2 > 128 || tile.iter().any(|&t| t == 0 || t > 256) {
            return Err(Error::invalid(
                what,
                format!("tensor map box {tile:?}: each extent 1..=256, the first at most 64"),
            ));
        }
        let address = self.element_address(what, array)?;
        if address % 16 != 0 || (dims[0] * 2) % 16 != 0 {
            return Err(Error::invalid(
                what,
                "a tensor map needs a 16-byte aligned start and rows a multiple of 16 bytes",
            ));
        }
        let strides = [dims[0] * 2, dims[0] * dims[1] * 2];
        let element_strides = [1u32; 3];
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        self.ctx.bind_to_thread().map_err(|e| self.fail(what, "binding the context", e))?;
        // SAFETY: every pointer addresses a live local of the length the driver reads (rank 3:
        // three dims, two strides, three box extents, three element strides); `address` is the
        // start of device memory this backend owns, which the driver only records.
        let status = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
                3,
                address as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                tile.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Driver {
                backend: "cuda",
                kernel: what.to_string(),
                msg: format!("cuTensorMapEncodeTiled: {status:?}"),
            });
        }
        let mut bytes = [0u8; TENSOR_MAP_BYTES];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Ok(bytes)
    }
}
