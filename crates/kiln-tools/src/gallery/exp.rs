//! Elementwise `exp`, the MLX documentation's first kernel, in two forms.
//!
//! Maths: `out[i] = exp(x[i])`, computed in f32 and rounded once to `T`.
//! - `exp`: row-contiguous input (`ensure_row_contiguous`), one thread per element.
//! - `exp_strided`: any view (slices with negative steps, transposes, broadcasts) read in place
//!   through `elem_to_loc(elem, inp_shape, inp_strides, inp_ndim)`; no copy is made.
//!
//! Layout: input any shape of f32/f16/bf16; output the same shape, row-contiguous, same dtype.
//! Reference: `f64::exp` of the dtype-rounded inputs. Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, host_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng, FLOAT_DTYPES,
};
use kiln::array::{Array, SliceArg};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::Result;
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "exp", dtypes: &FLOAT_DTYPES, demo_dtypes: &FLOAT_DTYPES, demo: Demo::Kernel(demo) };
pub const STRIDED_ENTRY: Entry =
    Entry { name: "exp_strided", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo_strided) };

const SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    out[elem] = static_cast<T>(metal::exp(static_cast<float>(inp[elem])));
"#;

// A signed element index keeps negative strides (reversed slices) exact in `elem_to_loc`.
const STRIDED_SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    int64_t loc = elem_to_loc(static_cast<int64_t>(elem), inp_shape, inp_strides, inp_ndim);
    out[elem] = static_cast<T>(metal::exp(static_cast<float>(inp[loc])));
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();
static STRIDED_KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn kernel() -> Result<&'static MetalKernel> {
    KERNEL.one("exp", || MetalKernel::new("gallery_exp", &["inp"], &["out"], SOURCE))
}

fn strided_kernel() -> Result<&'static MetalKernel> {
    STRIDED_KERNEL.one("exp_strided", || {
        Ok(MetalKernel::new("gallery_exp_strided", &["inp"], &["out"], STRIDED_SOURCE)?.ensure_row_contiguous(false))
    })
}

fn prepare(x: &Array, strided: bool) -> Result<Prepared> {
    let op = if strided { "exp_strided" } else { "exp" };
    check_dtype(op, x.dtype(), &FLOAT_DTYPES)?;
    let spec =
        LaunchSpec::new([dim(op, x.size())?, 1, 1], [256, 1, 1]).output(x.shape(), x.dtype()).template("T", x.dtype());
    let kernel = if strided { strided_kernel()? } else { kernel()? };
    Ok(Prepared::new(kernel, vec![x.into()], spec))
}

/// `exp(x)` elementwise; a non-contiguous `x` is copied to row-contiguous first.
pub fn exp(x: &Array) -> Result<Array> {
    prepare(x, false)?.run_one()
}

/// `exp(x)` elementwise, reading `x` in place through its strides.
pub fn exp_strided(x: &Array) -> Result<Array> {
    prepare(x, true)?.run_one()
}

pub fn reference(x: &[f64]) -> Vec<f64> {
    x.iter().map(|v| v.exp()).collect()
}

/// One verified run of `exp` over `shape`.
pub fn check(device: Device, dtype: DType, shape: &[usize], seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    let (x, xv) = host_input(dtype, shape, &rng.normals(n, 1.5))?;
    let (outs, time) = prepare(&x.to_device(device)?, false)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

/// One verified run of `exp_strided` on a view of a `base` array: every other row, the columns
/// reversed, then transposed, so strides are non-unit, negative and permuted.
pub fn check_strided(device: Device, dtype: DType, base: [usize; 3], seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let n = base.iter().product();
    let (x, _) = host_input(dtype, &base, &rng.normals(n, 1.5))?;
    let slices = [SliceArg { start: None, stop: None, step: 2 }, SliceArg { start: None, stop: None, step: -1 }];
    let view_of = |a: &Array| -> Result<Array> { a.slice(&slices)?.transpose(&[2, 0, 1]) };
    // The reference reads the same view on the host.
    let xv = view_of(&x)?.to_f64_vec()?;
    let view = view_of(&x.to_device(device)?)?;
    let (outs, time) = prepare(&view, true)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, &[37, 129], seed)
}

fn demo_strided(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check_strided(device, dtype, [9, 13, 21], seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_kernel_source_reads_through_elem_to_loc() {
        let x = Array::from_f64(DType::F16, &[4, 6], &[0.5; 24]).unwrap();
        let view = x.t();
        let p = prepare(&view, true).unwrap();
        let g = p.metal_kernel().unwrap().generate(std::slice::from_ref(&view), p.spec()).unwrap();
        assert!(g.source.contains("const constant int* inp_shape [[buffer(1)]]"), "{}", g.source);
        assert!(g.source.contains("const constant int64_t* inp_strides [[buffer(2)]]"), "{}", g.source);
        assert!(g.source.contains("elem_to_loc(static_cast<int64_t>(elem)"), "{}", g.source);
        assert!(g.source.contains("_float16_t<float16_t>;"), "{}", g.source);
    }

    #[test]
    fn reference_is_exp() {
        assert_eq!(reference(&[0.0, 1.0]), vec![1.0, std::f64::consts::E]);
    }
}
