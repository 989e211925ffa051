//! Rotary position embedding with `mx.fast.rope` semantics.
//!
//! For `x` (..., L, D), position `p = (offset + t) · scale` of row `t` along the second-to-last
//! axis, and pair `j < dims/2` with `θ = p · base^(−2j/dims)`:
//! `y[i0] = x[i0] cos θ − x[i1] sin θ`, `y[i1] = x[i1] cos θ + x[i0] sin θ`, where the pair is
//! `(i0, i1) = (j, j + dims/2)` (half-split, `traditional = false`) or `(2j, 2j + 1)`
//! (`traditional = true`). Elements `dims..D` are copied unchanged.
//!
//! The angle is formed in f32 as MLX does (`exp2` of `−2j/dims · log2 base`, times the
//! position), so its absolute error grows with the position: about `p · 1e-7` radians. The
//! f32 checks keep positions below 100; at the anchor's positions (≤ 1024) the f16/bf16
//! rounding dominates.
//!
//! Layout: `x` (..., L, D) of f32/f16/bf16 with at least 2 axes (a non-contiguous input is
//! copied to row-contiguous first); `dims` even, 2 ≤ dims ≤ D; `base` > 0. Output (..., L, D)
//! row-contiguous in the dtype of `x`.
//!
//! Kernel: one thread per (position t, pairs) and a run of up to R rows with that position
//! (rows of different batch/head entries share `θ`, so each `sin`/`cos` pair serves R rows);
//! consecutive threads take consecutive pairs, so loads and stores are coalesced. Threads past
//! the pairs copy the tail `dims..D`. Variant rule, first match:
//! - `kiln_rope_wide16`: f16/bf16, half-split, dims % 16 == 0, D % 8 == 0 and `x` 8-element
//!   aligned. Each thread takes 8 adjacent pairs (one 16-byte load and store from each half)
//!   for a run of 2 rows, all loads before the first store; the tail goes 8 elements at a time.
//!   (2 rows per thread: the fastest measured on the H100, where 1 row lets the angles cost
//!   more than the memory; `bench/results/notes/ops.md`.)
//! - `kiln_rope_pairs`, `kiln_rope_traditional_pairs`: dims % 4 == 0, D % 4 == 0 and `x`
//!   4-element aligned: each thread takes two adjacent pairs with vector loads for 4 rows.
//! - `kiln_rope`, `kiln_rope_traditional`: one pair with scalar loads for 4 rows.
//!
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::kernel_cache::KernelCache;
use super::plan::OpCall;
use super::util::{check_float, check_nonempty, grid_dim, index_i32, vec4_aligned};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};

const OP: &str = "rope";

/// Rows that share one `sin`/`cos` evaluation.
const ROWS_PER_THREAD: usize = 4;
/// Rows per thread of the 16-byte form (its threads evaluate 8 angles each).
const WIDE16_ROWS: usize = 2;

// Both forms: thread `gid` takes slot `gid % slots` of time step `t` for rows `first..last` of
// the outer axes.
const SLOT: &str = r#"uint gid = thread_position_in_grid.x;
    uint S = uint(slots);
    uint half_dims = uint(dims) / 2;
    uint D = uint(d);
    uint L = uint(len);
    uint slot = gid % S;
    uint rest = gid / S;
    uint t = rest % L;
    uint first = (rest / L) * R;
    uint last = metal::min(first + R, uint(n_outer));"#;

const SOURCE: &str = r#"
    %SLOT%
    if (slot < half_dims) {
        float pos = static_cast<float>(offset + static_cast<int>(t)) * scale;
        float inv_freq = metal::exp2(-static_cast<float>(2 * slot) / static_cast<float>(dims) * log2_base);
        float theta = pos * inv_freq;
        float c = metal::cos(theta);
        float s = metal::sin(theta);
        uint i0 = TRADITIONAL ? 2 * slot : slot;
        uint i1 = TRADITIONAL ? 2 * slot + 1 : slot + half_dims;
        for (uint o = first; o < last; ++o) {
            int64_t base = (int64_t(o) * L + t) * D;
            float x0 = static_cast<float>(x[base + i0]);
            float x1 = static_cast<float>(x[base + i1]);
            out[base + i0] = static_cast<T>(x0 * c - x1 * s);
            out[base + i1] = static_cast<T>(x1 * c + x0 * s);
        }
    } else {
        uint i = uint(dims) + (slot - half_dims);
        for (uint o = first; o < last; ++o) {
            int64_t base = (int64_t(o) * L + t) * D;
            out[base + i] = x[base + i];
        }
    }
"#;

// Two adjacent pairs per thread: pairs (j, j + 1) with j = 2·slot, loaded as two `vec<T, 2>`
// (half-split) or one `vec<T, 4>` (traditional); the tail is copied two elements at a time.
const PAIRS_SOURCE: &str = r#"
    %SLOT%
    if (slot < half_dims / 2) {
        uint j = 2 * slot;
        float pos = static_cast<float>(offset + static_cast<int>(t)) * scale;
        float th0 = pos * metal::exp2(-static_cast<float>(2 * j) / static_cast<float>(dims) * log2_base);
        float th1 = pos * metal::exp2(-static_cast<float>(2 * j + 2) / static_cast<float>(dims) * log2_base);
        float c0 = metal::cos(th0);
        float s0 = metal::sin(th0);
        float c1 = metal::cos(th1);
        float s1 = metal::sin(th1);
        for (uint o = first; o < last; ++o) {
            int64_t base = (int64_t(o) * L + t) * D;
            if (TRADITIONAL) {
                const device vec<T, 4>* xv = (const device vec<T, 4>*)(x + base + 2 * j);
                vec<T, 4> v = xv[0];
                float a0 = static_cast<float>(v.x);
                float b0 = static_cast<float>(v.y);
                float a1 = static_cast<float>(v.z);
                float b1 = static_cast<float>(v.w);
                device vec<T, 4>* ov = (device vec<T, 4>*)(out + base + 2 * j);
                ov[0] = vec<T, 4>(static_cast<T>(a0 * c0 - b0 * s0), static_cast<T>(b0 * c0 + a0 * s0),
                                  static_cast<T>(a1 * c1 - b1 * s1), static_cast<T>(b1 * c1 + a1 * s1));
            } else {
                vec<T, 2> va = ((const device vec<T, 2>*)(x + base + j))[0];
                vec<T, 2> vb = ((const device vec<T, 2>*)(x + base + half_dims + j))[0];
                float a0 = static_cast<float>(va.x);
                float a1 = static_cast<float>(va.y);
                float b0 = static_cast<float>(vb.x);
                float b1 = static_cast<float>(vb.y);
                ((device vec<T, 2>*)(out + base + j))[0] =
                    vec<T, 2>(static_cast<T>(a0 * c0 - b0 * s0), static_cast<T>(a1 * c1 - b1 * s1));
                ((device vec<T, 2>*)(out + base + half_dims + j))[0] =
                    vec<T, 2>(static_cast<T>(b0 * c0 + a0 * s0), static_cast<T>(b1 * c1 + a1 * s1));
            }
        }
    } else {
        uint i = uint(dims) + 2 * (slot - half_dims / 2);
        for (uint o = first; o < last; ++o) {
            int64_t base = (int64_t(o) * L + t) * D;
            ((device vec<T, 2>*)(out + base + i))[0] = ((const device vec<T, 2>*)(x + base + i))[0];
        }
    }
"#;

// Half-split, 16-bit: a chunk of 8 adjacent pairs (j..j + 8), one 16-byte `uint4` from each
// half, whose 32-bit words hold element pairs; the R rows' loads are all issued before the
// first store. The tail is copied 8 elements at a time.
const WIDE16_SOURCE: &str = r#"
    %SLOT%
    uint chunks = half_dims / 8;
    if (slot < chunks) {
        uint j = 8 * slot;
        float pos = static_cast<float>(offset + static_cast<int>(t)) * scale;
        float c[8];
        float s[8];
        #pragma unroll
        for (uint i = 0; i < 8; ++i) {
            float th = pos * metal::exp2(-static_cast<float>(2 * (j + i)) / static_cast<float>(dims) * log2_base);
            c[i] = metal::cos(th);
            s[i] = metal::sin(th);
        }
        uint4 a[R];
        uint4 b[R];
        #pragma unroll
        for (uint r = 0; r < R; ++r) {
            if (first + r < last) {
                int64_t base = (int64_t(first + r) * L + t) * D;
                a[r] = *((const device uint4*)(x + base + j));
                b[r] = *((const device uint4*)(x + base + half_dims + j));
            }
        }
        #pragma unroll
        for (uint r = 0; r < R; ++r) {
            if (first + r < last) {
                int64_t base = (int64_t(first + r) * L + t) * D;
                uint2 w0 = kiln_rope_word<T>(a[r].x, b[r].x, c[0], s[0], c[1], s[1]);
                uint2 w1 = kiln_rope_word<T>(a[r].y, b[r].y, c[2], s[2], c[3], s[3]);
                uint2 w2 = kiln_rope_word<T>(a[r].z, b[r].z, c[4], s[4], c[5], s[5]);
                uint2 w3 = kiln_rope_word<T>(a[r].w, b[r].w, c[6], s[6], c[7], s[7]);
                *((device uint4*)(out + base + j)) = uint4(w0.x, w1.x, w2.x, w3.x);
                *((device uint4*)(out + base + half_dims + j)) = uint4(w0.y, w1.y, w2.y, w3.y);
            }
        }
    } else {
        uint i = uint(dims) + 8 * (slot - chunks);
        for (uint o = first; o < last; ++o) {
            int64_t base = (int64_t(o) * L + t) * D;
            *((device uint4*)(out + base + i)) = *((const device uint4*)(x + base + i));
        }
    }
"#;

// Rotates two pairs held in 32-bit words of 16-bit elements: `a` holds (x[j], x[j + 1]) and `b`
// (x[j + dims/2], x[j + 1 + dims/2]); returns the rotated words of both halves.
const WIDE16_HEADER: &str = r#"
template <typename T>
inline uint2 kiln_rope_word(uint a, uint b, float c0, float s0, float c1, float s1) {
    float a0 = static_cast<float>(as_type<T>(ushort(a & 0xffffu)));
    float a1 = static_cast<float>(as_type<T>(ushort(a >> 16)));
    float b0 = static_cast<float>(as_type<T>(ushort(b & 0xffffu)));
    float b1 = static_cast<float>(as_type<T>(ushort(b >> 16)));
    uint ya = uint(as_type<ushort>(static_cast<T>(a0 * c0 - b0 * s0))) |
              (uint(as_type<ushort>(static_cast<T>(a1 * c1 - b1 * s1))) << 16);
    uint yb = uint(as_type<ushort>(static_cast<T>(b0 * c0 + a0 * s0))) |
              (uint(as_type<ushort>(static_cast<T>(b1 * c1 + a1 * s1))) << 16);
    return uint2(ya, yb);
}
"#;

/// The kernel forms; the index of each is its `KERNELS` cell.
#[derive(Clone, Copy)]
enum Form {
    Pairs1 = 0,
    Traditional1 = 1,
    Pairs2 = 2,
    Traditional2 = 3,
    Wide16 = 4,
}

static KERNELS: KernelCache<MetalKernel, 5> = KernelCache::new();

fn kernel(form: Form) -> Result<&'static MetalKernel> {
    KERNELS.get(OP, form as usize, || {
        let (name, source) = match form {
            Form::Pairs1 => ("kiln_rope", SOURCE),
            Form::Traditional1 => ("kiln_rope_traditional", SOURCE),
            Form::Pairs2 => ("kiln_rope_pairs", PAIRS_SOURCE),
            Form::Traditional2 => ("kiln_rope_traditional_pairs", PAIRS_SOURCE),
            Form::Wide16 => ("kiln_rope_wide16", WIDE16_SOURCE),
        };
        let k = MetalKernel::new(
            name,
            &["x", "dims", "d", "len", "n_outer", "slots", "offset", "scale", "log2_base"],
            &["out"],
            source.replace("%SLOT%", SLOT),
        )?;
        Ok(if matches!(form, Form::Wide16) { k.header(WIDE16_HEADER) } else { k })
    })
}

/// The validated call (see the module header).
pub fn rope_call(x: &Array, dims: usize, traditional: bool, base: f32, scale: f32, offset: i32) -> Result<OpCall> {
    check_float(OP, "x", x)?;
    check_nonempty(OP, "x", x, 2)?;
    let nd = x.ndim();
    let (l, d) = (x.shape()[nd - 2], x.shape()[nd - 1]);
    if dims < 2 || dims % 2 != 0 || dims > d {
        return Err(Error::invalid(OP, format!("dims must be even and in 2..={d} (the last axis), got {dims}")));
    }
    if !(base > 0.0 && base.is_finite() && scale.is_finite()) {
        return Err(Error::invalid(
            OP,
            format!("base must be finite and positive and scale finite, got {base}, {scale}"),
        ));
    }
    let n_outer = x.size() / (l * d);
    // Two pairs per thread need 4-element alignment of every row, 16-byte chunks 8-element
    // alignment (inputs under 8 elements live in `constant` space, where vector casts do not
    // apply; a non-contiguous input is copied to a fresh, aligned buffer).
    let aligned8 = !x.is_row_contiguous() || x.offset() % 8 == 0;
    let (form, slots, rows) = if x.dtype().size() == 2 && !traditional && dims % 16 == 0 && d % 8 == 0 && aligned8 {
        (Form::Wide16, dims / 16 + (d - dims) / 8, WIDE16_ROWS)
    } else if dims % 4 == 0 && d % 4 == 0 && vec4_aligned(x) && x.size() >= 8 {
        (if traditional { Form::Traditional2 } else { Form::Pairs2 }, dims / 4 + (d - dims) / 2, ROWS_PER_THREAD)
    } else {
        (if traditional { Form::Traditional1 } else { Form::Pairs1 }, dims / 2 + (d - dims), ROWS_PER_THREAD)
    };
    let threads = n_outer.div_ceil(rows) * l * slots;
    index_i32(OP, "D", d)?;
    index_i32(OP, "batch", n_outer)?;
    let spec = LaunchSpec::new([grid_dim(OP, threads)?, 1, 1], [256, 1, 1])
        .output(x.shape(), x.dtype())
        .template("T", x.dtype())
        .template("TRADITIONAL", traditional)
        .template("R", rows as i32);
    let inputs = vec![
        x.into(),
        (dims as i32).into(),
        (d as i32).into(),
        index_i32(OP, "L", l)?.into(),
        (n_outer as i32).into(),
        (slots as i32).into(),
        offset.into(),
        scale.into(),
        ((base as f64).log2() as f32).into(),
    ];
    Ok(OpCall::new(kernel(form)?, inputs, spec))
}

/// Rotates the first `dims` features of `x` (..., L, D) for positions `offset..offset + L`
/// (times `scale`); the result lives on the device of `x`.
pub fn rope(x: &Array, dims: usize, traditional: bool, base: f32, scale: f32, offset: i32) -> Result<Array> {
    rope_call(x, dims, traditional, base, scale, offset)?.run_one()
}

/// The formula in f64 over values in row-major order of shape (..., `l`, `d`).
#[allow(clippy::too_many_arguments)]
pub fn reference(
    x: &[f64],
    l: usize,
    d: usize,
    dims: usize,
    traditional: bool,
    base: f64,
    scale: f64,
    offset: i32,
) -> Vec<f64> {
    let half = dims / 2;
    let mut out = x.to_vec();
    for (row, (xr, yr)) in x.chunks(d).zip(out.chunks_mut(d)).enumerate() {
        let pos = (offset as f64 + (row % l) as f64) * scale;
        for j in 0..half {
            let theta = pos * base.powf(-2.0 * j as f64 / dims as f64);
            let (s, c) = theta.sin_cos();
            let (i0, i1) = if traditional { (2 * j, 2 * j + 1) } else { (j, j + half) };
            yr[i0] = xr[i0] * c - xr[i1] * s;
            yr[i1] = xr[i1] * c + xr[i0] * s;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_rotates_pairs_and_copies_the_tail() {
        let x = [0.3, -1.2, 2.0, 0.5, 7.0];
        assert_eq!(super::reference(&x, 1, 5, 4, false, 1e4, 1.0, 0), x.to_vec());
        let y = super::reference(&x, 1, 5, 4, false, 1e4, 1.0, 3);
        // Pair 0 (elements 0 and 2) turns by the position itself; the tail is untouched.
        assert!((y[0] - (0.3 * 3f64.cos() - 2.0 * 3f64.sin())).abs() < 1e-12);
        assert_eq!(y[4], 7.0);
        let t = super::reference(&x, 1, 5, 4, true, 1e4, 0.5, 3);
        assert!((t[1] - (-1.2 * 1.5f64.cos() + 0.3 * 1.5f64.sin())).abs() < 1e-12);
    }
}
