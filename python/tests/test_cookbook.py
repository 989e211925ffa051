"""The seed cookbook's kernels (MLX's custom-kernel docs and the kernel templates) written as
`kiln.metal_kernel` bodies, run on NumPy arrays of every float dtype and checked against NumPy
references in float64 on fresh random inputs."""

import numpy as np
import pytest

import kiln

from conftest import FLOAT_DTYPES, assert_close, random_array

dtypes = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)


def f64(a):
    return np.asarray(a).astype(np.float64)


MYEXP = kiln.metal_kernel("myexp", ["inp"], ["out"], """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
""")

EXP_STRIDED = kiln.metal_kernel("myexp_strided", ["inp"], ["out"], """
    uint elem = thread_position_in_grid.x;
    // Signed: NumPy views may step backwards.
    int64_t loc = elem_to_loc(int64_t(elem), inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    out[elem] = metal::exp(tmp);
""", ensure_row_contiguous=False)


@dtypes
def test_myexp(rng, dtype):
    a = random_array(rng, (4, 16), dtype)
    (out,) = MYEXP(inputs=[a], template=[("T", np.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
                   output_shapes=[a.shape], output_dtypes=[a.dtype])
    assert out.dtype == dtype
    assert_close(out, np.exp(f64(a)), dtype)


@dtypes
def test_myexp_strided_without_a_copy(rng, dtype):
    a = random_array(rng, (9, 24), dtype)[::2, ::-3]
    (out,) = EXP_STRIDED(inputs=[a], template=[("T", np.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
                         output_shapes=[a.shape], output_dtypes=[a.dtype])
    assert_close(out, np.exp(f64(a)), dtype)


GELU = kiln.metal_kernel("gelu_tanh", ["x"], ["out"], """
    uint i = thread_position_in_grid.x;
    float v = (float)x[i];
    float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
    out[i] = (T)(0.5f * v * (1.0f + metal::precise::tanh(inner)));
""")


@dtypes
def test_silu_with_a_bounds_check_on_a_partial_group(rng, dtype):
    k = kiln.metal_kernel("silu_n", ["x", "n"], ["out"], """
        uint i = thread_position_in_grid.x;
        if (i >= n) return;
        float v = (float)x[i];
        out[i] = (T)(v / (1.0f + metal::exp(-v)));
    """)
    x = random_array(rng, (1000,), dtype, -6, 6)
    (out,) = k(inputs=[x, x.size], template=[("T", dtype)], grid=(1024, 1, 1), threadgroup=(256, 1, 1),
               output_shapes=[x.shape], output_dtypes=[dtype])
    v = f64(x)
    assert_close(out, v / (1 + np.exp(-v)), dtype)


@dtypes
def test_gelu_tanh_approximation(rng, dtype):
    x = random_array(rng, (3, 100), dtype, -5, 5)
    (out,) = GELU(inputs=[x], template=[("T", dtype)], grid=(x.size, 1, 1), threadgroup=(128, 1, 1),
                  output_shapes=[x.shape], output_dtypes=[dtype])
    v = f64(x)
    assert_close(out, 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3))), dtype)


def rms_norm_ref(x, w, eps):
    x = f64(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * f64(w)


RMS_SIMD = kiln.metal_kernel("rms_norm_simd", ["x", "w", "eps"], ["out"], """
    // One simdgroup per row of D <= 32 elements.
    uint row = threadgroup_position_in_grid.x;
    uint lane = thread_position_in_threadgroup.x;
    uint D = x_shape[1];
    float v = lane < D ? (float)x[row * D + lane] : 0.0f;
    float total = simd_sum(v * v);
    float inv = metal::rsqrt(total / D + eps);
    if (lane < D) out[row * D + lane] = (T)(v * inv * (float)w[lane]);
""")

RMS_TG = kiln.metal_kernel("rms_norm_threadgroup", ["x", "w", "eps"], ["out"], """
    // One threadgroup of N threads per row; partial sums through threadgroup memory.
    threadgroup float partial[32];
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_position_in_threadgroup.x;
    uint D = x_shape[1];
    float acc = 0.0f;
    for (uint j = tid; j < D; j += N) { float v = (float)x[row * D + j]; acc += v * v; }
    acc = simd_sum(acc);
    if (thread_index_in_simdgroup == 0) partial[simdgroup_index_in_threadgroup] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint s = 0; s < N / 32; ++s) total += partial[s];
    float inv = metal::rsqrt(total / D + eps);
    for (uint j = tid; j < D; j += N) out[row * D + j] = (T)((float)x[row * D + j] * inv * (float)w[j]);
""")


@dtypes
def test_rms_norm_one_simdgroup_per_row(rng, dtype):
    x = random_array(rng, (7, 29), dtype)
    w = random_array(rng, (29,), dtype, 0.5, 1.5)
    (out,) = RMS_SIMD(inputs=[x, w, 1e-5], template=[("T", dtype)], grid=(7 * 32, 1, 1), threadgroup=(32, 1, 1),
                      output_shapes=[x.shape], output_dtypes=[dtype])
    assert_close(out, rms_norm_ref(x, w, 1e-5), dtype)


@dtypes
def test_rms_norm_many_simdgroups_per_row(rng, dtype):
    x = random_array(rng, (5, 1000), dtype)
    w = random_array(rng, (1000,), dtype, 0.5, 1.5)
    (out,) = RMS_TG(inputs=[x, w, 1e-6], template=[("T", dtype), ("N", 256)], grid=(5 * 256, 1, 1),
                    threadgroup=(256, 1, 1), output_shapes=[x.shape], output_dtypes=[dtype])
    assert_close(out, rms_norm_ref(x, w, 1e-6), dtype)


@dtypes
def test_residual_rms_norm_fused(rng, dtype):
    k = kiln.metal_kernel("residual_rms_norm", ["x", "r", "w"], ["out", "sum"], """
        uint row = threadgroup_position_in_grid.x;
        uint lane = thread_position_in_threadgroup.x;
        uint D = x_shape[1];
        float acc = 0.0f;
        for (uint j = lane; j < D; j += 32) {
            float h = (float)x[row * D + j] + (float)r[row * D + j];
            sum[row * D + j] = (T)h;
            acc += h * h;
        }
        float inv = metal::rsqrt(simd_sum(acc) / D + 1e-5f);
        for (uint j = lane; j < D; j += 32) {
            float h = (float)x[row * D + j] + (float)r[row * D + j];
            out[row * D + j] = (T)(h * inv * (float)w[j]);
        }
    """)
    x, r = random_array(rng, (6, 200), dtype), random_array(rng, (6, 200), dtype)
    w = random_array(rng, (200,), dtype, 0.5, 1.5)
    out, s = k(inputs=[x, r, w], template=[("T", dtype)], grid=(6 * 32, 1, 1), threadgroup=(32, 1, 1),
               output_shapes=[x.shape, x.shape], output_dtypes=[dtype, dtype])
    h = f64(x) + f64(r)
    assert_close(s, h, dtype)
    assert_close(out, rms_norm_ref(h, w, 1e-5), dtype)


@dtypes
def test_softmax_numerically_stable(rng, dtype):
    k = kiln.metal_kernel("softmax", ["x"], ["out"], """
        uint row = threadgroup_position_in_grid.x;
        uint lane = thread_position_in_threadgroup.x;
        uint D = x_shape[1];
        float m = -INFINITY;
        for (uint j = lane; j < D; j += 32) m = metal::max(m, (float)x[row * D + j]);
        m = simd_max(m);
        float s = 0.0f;
        for (uint j = lane; j < D; j += 32) s += metal::exp((float)x[row * D + j] - m);
        s = simd_sum(s);
        for (uint j = lane; j < D; j += 32) out[row * D + j] = (T)(metal::exp((float)x[row * D + j] - m) / s);
    """)
    x = random_array(rng, (9, 77), dtype, -20, 20)
    (out,) = k(inputs=[x], template=[("T", dtype)], grid=(9 * 32, 1, 1), threadgroup=(32, 1, 1),
               output_shapes=[x.shape], output_dtypes=[dtype])
    v = f64(x)
    e = np.exp(v - v.max(-1, keepdims=True))
    assert_close(out, e / e.sum(-1, keepdims=True), dtype)


def test_parameters_through_an_integer_buffer(rng):
    k = kiln.metal_kernel("scale_shift", ["x", "params"], ["out"], """
        uint i = thread_position_in_grid.x;
        int scale = params[0];
        int shift = params[1];
        if (i < uint(params[2])) out[i] = x[i] * scale + shift;
    """)
    x = random_array(rng, (50,), np.float32)
    params = np.array([3, -7, 50], np.int32)
    (out,) = k(inputs=[x, params], grid=(64, 1, 1), threadgroup=(32, 1, 1), output_shapes=[x.shape],
               output_dtypes=[np.float32], init_value=0)
    assert_close(out, f64(x) * 3 - 7, np.float32)


def test_atomic_accumulation_with_duplicate_indices(rng):
    k = kiln.metal_kernel("scatter_add", ["values", "index"], ["out"], """
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&out[index[i]], values[i], memory_order_relaxed);
    """, atomic_outputs=True)
    values = random_array(rng, (4096,), np.float32)
    index = rng.integers(0, 37, size=4096).astype(np.int32)
    (out,) = k(inputs=[values, index], grid=(4096, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(37,)],
               output_dtypes=[np.float32], init_value=0)
    want = np.zeros(37)
    np.add.at(want, index, f64(values))
    assert_close(out, want, np.float32)


@dtypes
@pytest.mark.parametrize("traditional", [False, True])
def test_rope(rng, dtype, traditional):
    k = kiln.metal_kernel("rope", ["x", "offset", "base"], ["out"], """
        // One thread per rotated pair: x (T, D), positions offset + row.
        uint pair = thread_position_in_grid.x;
        uint row = thread_position_in_grid.y;
        uint D = x_shape[1];
        uint half_d = D / 2;
        float theta = float(offset + int(row)) * metal::pow(base, -float(2 * pair) / float(D));
        float c = metal::precise::cos(theta), s = metal::precise::sin(theta);
        uint a = TRADITIONAL ? 2 * pair : pair;
        uint b = TRADITIONAL ? 2 * pair + 1 : pair + half_d;
        float x1 = (float)x[row * D + a], x2 = (float)x[row * D + b];
        out[row * D + a] = (T)(x1 * c - x2 * s);
        out[row * D + b] = (T)(x1 * s + x2 * c);
    """)
    x = random_array(rng, (11, 64), dtype)
    (out,) = k(inputs=[x, 5, 10000.0], template=[("T", dtype), ("TRADITIONAL", traditional)], grid=(32, 11, 1),
               threadgroup=(32, 4, 1), output_shapes=[x.shape], output_dtypes=[dtype])
    v = f64(x)
    pos = np.arange(11)[:, None] + 5
    theta = pos * 10000.0 ** (-np.arange(0, 64, 2) / 64)
    if traditional:
        x1, x2 = v[:, 0::2], v[:, 1::2]
    else:
        x1, x2 = v[:, :32], v[:, 32:]
    r1, r2 = x1 * np.cos(theta) - x2 * np.sin(theta), x1 * np.sin(theta) + x2 * np.cos(theta)
    want = np.empty_like(v)
    if traditional:
        want[:, 0::2], want[:, 1::2] = r1, r2
    else:
        want[:, :32], want[:, 32:] = r1, r2
    assert_close(out, want, dtype)


GRID_SAMPLE_HEADER = """
// Unnormalised source coordinate of a grid value in [-1, 1] (align_corners=False), its floor
// and the fractional weight.
inline int source_index(float g, int size, thread float& frac) {
    float pos = ((g + 1.0f) * size - 1.0f) * 0.5f;
    float base = metal::floor(pos);
    frac = pos - base;
    return int(base);
}
"""

GRID_SAMPLE_SOURCE = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1], W = x_shape[2], C = x_shape[3];
    int points_per_batch = grid_shape[1] * grid_shape[2];
    uint point = elem / C;
    int channel = elem % C;
    int b = point / points_per_batch;
    float fx, fy;
    int x0 = source_index(static_cast<float>(grid[2 * point]), W, fx);
    int y0 = source_index(static_cast<float>(grid[2 * point + 1]), H, fy);
    float acc = 0.0f;
    for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
            int xi = x0 + dx, yi = y0 + dy;
            if (xi >= 0 && xi < W && yi >= 0 && yi < H) {
                float w = (dx ? fx : 1.0f - fx) * (dy ? fy : 1.0f - fy);
                acc += w * static_cast<float>(x[((b * H + yi) * W + xi) * C + channel]);
            }
        }
    }
    out[elem] = static_cast<T>(acc);
"""

GRID_SAMPLE = kiln.metal_kernel("grid_sample", ["x", "grid"], ["out"], GRID_SAMPLE_SOURCE, header=GRID_SAMPLE_HEADER)

GRID_SAMPLE_VJP_SOURCE = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1], W = x_shape[2], C = x_shape[3];
    int points_per_batch = grid_shape[1] * grid_shape[2];
    uint point = elem / C;
    int channel = elem % C;
    int b = point / points_per_batch;
    float fx, fy;
    int x0 = source_index(static_cast<float>(grid[2 * point]), W, fx);
    int y0 = source_index(static_cast<float>(grid[2 * point + 1]), H, fy);
    float cot = static_cast<float>(cotangent[elem]);
    float gx = 0.0f, gy = 0.0f;
    for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
            int xi = x0 + dx, yi = y0 + dy;
            if (xi >= 0 && xi < W && yi >= 0 && yi < H) {
                float wx = dx ? fx : 1.0f - fx, wy = dy ? fy : 1.0f - fy;
                uint offset = ((b * H + yi) * W + xi) * C + channel;
                atomic_fetch_add_explicit(&x_grad[offset], wx * wy * cot, memory_order_relaxed);
                float v = static_cast<float>(x[offset]) * cot;
                gx += (dx ? 1.0f : -1.0f) * wy * v;
                gy += (dy ? 1.0f : -1.0f) * wx * v;
            }
        }
    }
    atomic_fetch_add_explicit(&grid_grad[2 * point], gx * (0.5f * W), memory_order_relaxed);
    atomic_fetch_add_explicit(&grid_grad[2 * point + 1], gy * (0.5f * H), memory_order_relaxed);
"""

GRID_SAMPLE_VJP = kiln.metal_kernel("grid_sample_vjp", ["x", "grid", "cotangent"], ["x_grad", "grid_grad"],
                                    GRID_SAMPLE_VJP_SOURCE, header=GRID_SAMPLE_HEADER, atomic_outputs=True)


def bilinear(x, grid):
    """grid_sample (bilinear, zeros padding, align_corners=False) in float64, with its VJP parts."""
    B, H, W, C = x.shape
    g = grid.reshape(B, -1, 2)
    px = ((g[..., 0] + 1) * W - 1) / 2
    py = ((g[..., 1] + 1) * H - 1) / 2
    x0, y0 = np.floor(px).astype(int), np.floor(py).astype(int)
    fx, fy = px - x0, py - y0
    corners = []
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            ok = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
            wx, wy = (fx if dx else 1 - fx), (fy if dy else 1 - fy)
            corners.append((dx, dy, xi.clip(0, W - 1), yi.clip(0, H - 1), ok, wx, wy))
    return corners


@dtypes
def test_grid_sample_forward(rng, dtype):
    x = random_array(rng, (2, 9, 11, 5), dtype)
    grid = random_array(rng, (2, 4, 6, 2), dtype, -1.1, 1.1)
    n = 2 * 4 * 6 * 5
    (out,) = GRID_SAMPLE(inputs=[x, grid], template=[("T", dtype)], grid=(n, 1, 1), threadgroup=(256, 1, 1),
                         output_shapes=[(2, 4, 6, 5)], output_dtypes=[dtype])
    xv, gv = f64(x), f64(grid)
    want = np.zeros((2, 24, 5))
    bidx = np.arange(2)[:, None]
    for dx, dy, xi, yi, ok, wx, wy in bilinear(xv, gv):
        want += (ok * wx * wy)[..., None] * xv[bidx, yi, xi]
    assert_close(out, want.reshape(2, 4, 6, 5), dtype)


@dtypes
def test_grid_sample_vjp_with_atomic_outputs(rng, dtype):
    x = random_array(rng, (2, 7, 8, 3), dtype)
    grid = random_array(rng, (2, 5, 4, 2), dtype, -1.1, 1.1)
    cot = random_array(rng, (2, 5, 4, 3), dtype)
    n = 2 * 5 * 4 * 3
    x_grad, grid_grad = GRID_SAMPLE_VJP(
        inputs=[x, grid, cot], template=[("T", dtype)], grid=(n, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[x.shape, grid.shape], output_dtypes=[np.float32, np.float32], init_value=0)
    xv, gv, cv = f64(x), f64(grid), f64(cot).reshape(2, 20, 3)
    want_x = np.zeros_like(xv)
    want_g = np.zeros((2, 20, 2))
    bidx = np.arange(2)[:, None]
    for dx, dy, xi, yi, ok, wx, wy in bilinear(xv, gv):
        w = ok * wx * wy
        for b in range(2):
            np.add.at(want_x[b], (yi[b], xi[b]), w[b][:, None] * cv[b])
        v = (xv[bidx, yi, xi] * cv).sum(-1) * ok
        want_g[..., 0] += (1 if dx else -1) * wy * v * (0.5 * 8)
        want_g[..., 1] += (1 if dy else -1) * wx * v * (0.5 * 7)
    tol = np.float32 if dtype == np.float32 else dtype
    assert_close(x_grad, want_x, tol)
    assert_close(grid_grad, want_g.reshape(grid.shape), tol)
