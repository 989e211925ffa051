#include <metal_stdlib>
using namespace metal;

// Blocked Householder QR of a batch of m x n matrices (compact WY), in place in the workspace W.
// Per panel of NB columns from k0 (b = min(NB, n - k0)):
//   qr_panel: one threadgroup per matrix factors W[k0:, k0:k0+b] column by column (the
//             reflectors v stored below the diagonal, v[k0+p] = 1 implicit) and forms the
//             upper triangular T with H_k0 ... H_k0+b-1 = I - V T V^T (LAPACK's larft).
//   qr_vty:   Y = V^T X[k0:, c0:]                    (NB x (n - c0), reduced over the rows)
//   qr_apply: X[k0:, c0:] -= V (op(T) Y), op(T) = T^T while factoring (X = W, c0 = k0 + b),
//             T while forming Q backwards from the identity (X = Q, c0 = k0).

constant int NB = 32;
constant int PANEL_THREADS = 1024;
constant int PANEL_SIMDGROUPS = 32;

struct Params {
  int m;
  int n;
  int k0;     // first column of the panel
  int c0;     // first column of X to update
  int trans;  // 1: apply T^T (factoring), 0: T (forming Q)
};

// Entry (i, p) of the panel's reflectors: unit diagonal, zero above.
static inline float v_at(device const float* w, int i, int p, int m, int n, int k0, int b) {
  const int d = k0 + p;
  if (p >= b || i < d || i >= m) {
    return 0.0f;
  }
  return i == d ? 1.0f : w[long(i) * n + d];
}

// W = A, Q = the first n columns of the m x m identity.
kernel void qr_init(device const float* A [[buffer(0)]],
                    device float* W [[buffer(1)]],
                    device float* Q [[buffer(2)]],
                    device float* Tb [[buffer(3)]],
                    device float* Y [[buffer(4)]],
                    constant Params& p [[buffer(5)]],
                    uint gid [[thread_position_in_grid]]) {
  const uint e = gid % (uint(p.m) * uint(p.n));
  W[gid] = A[gid];
  Q[gid] = e / uint(p.n) == e % uint(p.n) ? 1.0f : 0.0f;
}

// R = the upper triangle of W's first n rows.
kernel void qr_r(device const float* W [[buffer(0)]],
                 device float* R [[buffer(1)]],
                 constant Params& p [[buffer(2)]],
                 uint gid [[thread_position_in_grid]]) {
  const uint n = uint(p.n);
  const uint e = gid % (n * n);
  const uint mat = gid / (n * n);
  const uint i = e / n;
  const uint c = e % n;
  R[gid] = c >= i ? W[long(mat) * p.m * n + i * n + c] : 0.0f;
}

// T from the Gram matrix of the panel's reflectors (already stored in W): `taus` holds the
// scales; 1024 threads (simdgroup q, lane p).
static inline void panel_t(device const float* w, device float* Tb, threadgroup float* taus,
                           threadgroup float* g, threadgroup float* t,
                           int m, int n, int k0, int b, long mat, int tid, int lane, int sg) {
  {
    float acc = 0.0f;
#pragma unroll 8
    for (int i = k0; i < m; ++i) {
      acc += v_at(w, i, lane, m, n, k0, b) * v_at(w, i, sg, m, n, k0, b);
    }
    g[lane * (NB + 1) + sg] = acc;
  }
  if (sg == 0) {
    for (int q = 0; q < NB; ++q) {
      t[lane * (NB + 1) + q] = 0.0f;
    }
    t[lane * (NB + 1) + lane] = lane < b ? taus[lane] : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // T[0:q, q] = -tau_q T[0:q, 0:q] G[0:q, q], column by column.
  for (int q = 1; q < b; ++q) {
    if (sg == 0 && lane < q) {
      float s = 0.0f;
      for (int r = lane; r < q; ++r) {
        s += t[lane * (NB + 1) + r] * g[r * (NB + 1) + q];
      }
      t[lane * (NB + 1) + q] = -taus[q] * s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  device float* tm = Tb + (mat * ((n + NB - 1) / NB) + k0 / NB) * NB * NB;
  tm[tid] = t[(tid / NB) * (NB + 1) + tid % NB];
}

kernel void qr_panel(device float* W [[buffer(0)]],
                     device float* Tb [[buffer(1)]],
                     constant Params& p [[buffer(2)]],
                     uint3 group [[threadgroup_position_in_grid]],
                     uint tid_u [[thread_index_in_threadgroup]],
                     uint lane_u [[thread_index_in_simdgroup]],
                     uint sg_u [[simdgroup_index_in_threadgroup]]) {
  threadgroup float red[PANEL_SIMDGROUPS][NB + 1];
  threadgroup float fs[NB];
  threadgroup float taus[NB];
  threadgroup float g[NB * (NB + 1)];
  threadgroup float t[NB * (NB + 1)];
  const int m = p.m;
  const int n = p.n;
  const int k0 = p.k0;
  const int b = min(NB, n - k0);
  const int tid = int(tid_u);
  const int lane = int(lane_u);
  const int sg = int(sg_u);
  device float* w = W + long(group.x) * m * n;
  // Lane `lane` owns panel column c in the column updates (coalesced row segments).
  const int c = k0 + lane;
  const int cc = min(c, n - 1);

  for (int j = k0; j < k0 + b; ++j) {
    float part = 0.0f;
    for (int i0 = j + 1; i0 < m; i0 += PANEL_THREADS) {
      const int i = min(i0 + tid, m - 1);
      const float x = w[long(i) * n + j];
      part += select(0.0f, x * x, i0 + tid < m);
    }
    part = simd_sum(part);
    if (lane == 0) {
      red[sg][0] = part;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    float sigma = 0.0f;
    for (int s = 0; s < PANEL_SIMDGROUPS; ++s) {
      sigma += red[s][0];
    }
    const float alpha = w[long(j) * n + j];
    float tau = 0.0f;
    float beta = alpha;
    float scal = 0.0f;
    if (sigma > 0.0f) {
      const float norm = sqrt(alpha * alpha + sigma);
      beta = alpha <= 0.0f ? norm : -norm;
      tau = (beta - alpha) / beta;
      scal = 1.0f / (alpha - beta);
    }
    // Everyone has read red and the pivot before they change.
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    for (int i = j + 1 + tid; i < m; i += PANEL_THREADS) {
      w[long(i) * n + j] *= scal;
    }
    if (tid == 0) {
      w[long(j) * n + j] = beta;
      taus[j - k0] = tau;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    // f_c = tau (w[j][c] + sum_{i>j} v_i w[i][c]) for the panel columns c > j.
    const bool active = c > j && c < k0 + b;
    float dot = 0.0f;
#pragma unroll 8
    for (int i = j + 1 + sg; i < m; i += PANEL_SIMDGROUPS) {
      dot += active ? w[long(i) * n + j] * w[long(i) * n + cc] : 0.0f;
    }
    red[sg][lane] = dot;
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (sg == 0) {
      float sum = active ? w[long(j) * n + cc] : 0.0f;
      for (int s = 0; s < PANEL_SIMDGROUPS; ++s) {
        sum += red[s][lane];
      }
      fs[lane] = tau * sum;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    const float f = fs[lane];
    if (active) {
#pragma unroll 8
      for (int i = j + 1 + sg; i < m; i += PANEL_SIMDGROUPS) {
        w[long(i) * n + cc] -= f * w[long(i) * n + j];
      }
      if (sg == 0) {
        w[long(j) * n + cc] -= f;
      }
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  }

  panel_t(w, Tb, taus, g, t, m, n, k0, b, long(group.x), tid, lane, sg);
}

// The panel in registers: lane p holds column k0 + p, simdgroup s rows k0 + s + 32 r (r < R),
// so a column step needs two barriers and no device memory. Used while m - k0 <= 32 R, for
// R <= 8: 1024 threads leave 64 registers per thread, and R = 16 needs about 80.
template <int R>
kernel void qr_panel_regs(device float* W [[buffer(0)]],
                          device float* Tb [[buffer(1)]],
                          constant Params& p [[buffer(2)]],
                          uint3 group [[threadgroup_position_in_grid]],
                          uint tid_u [[thread_index_in_threadgroup]],
                          uint lane_u [[thread_index_in_simdgroup]],
                          uint sg_u [[simdgroup_index_in_threadgroup]]) {
  threadgroup float red[PANEL_SIMDGROUPS][NB + 1];
  threadgroup float red0[PANEL_SIMDGROUPS];
  threadgroup float alpha_sh[1];
  threadgroup float taus[NB];
  threadgroup float g[NB * (NB + 1)];
  threadgroup float t[NB * (NB + 1)];
  const int m = p.m;
  const int n = p.n;
  const int k0 = p.k0;
  const int b = min(NB, n - k0);
  const int tid = int(tid_u);
  const int lane = int(lane_u);
  const int sg = int(sg_u);
  const long mat = long(group.x);
  device float* w = W + mat * m * n;
  const bool mine = lane < b;
  const int c = k0 + (mine ? lane : 0);
  float x[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = k0 + sg + 32 * r;
    x[r] = (mine && i < m) ? w[long(i) * n + c] : 0.0f;
  }
  for (int jj = 0; jj < b; ++jj) {
    const int j = k0 + jj;
    // Row k0 + sg + 32 r is below row j for every r >= 1; for r = 0 when sg > jj.
    const bool below0 = sg > jj;
    const bool at0 = sg == jj;
    float part = below0 ? x[0] * x[0] : 0.0f;
#pragma unroll
    for (int r = 1; r < R; ++r) {
      part = fma(x[r], x[r], part);
    }
    part = simd_shuffle(part, ushort(jj));
    if (lane == 0) {
      red0[sg] = part;
    }
    if (sg == jj && lane == jj) {
      alpha_sh[0] = x[0];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float sigma = 0.0f;
    for (int s = 0; s < PANEL_SIMDGROUPS; ++s) {
      sigma += red0[s];
    }
    const float alpha = alpha_sh[0];
    float tau = 0.0f;
    float beta = alpha;
    float scal = 0.0f;
    if (sigma > 0.0f) {
      const float norm = sqrt(alpha * alpha + sigma);
      beta = alpha <= 0.0f ? norm : -norm;
      tau = (beta - alpha) / beta;
      scal = 1.0f / (alpha - beta);
    }
    if (lane == jj) {
      x[0] = below0 ? x[0] * scal : (at0 ? beta : x[0]);
#pragma unroll
      for (int r = 1; r < R; ++r) {
        x[r] *= scal;
      }
    }
    if (tid == 0) {
      taus[jj] = tau;
    }
    // This lane's partial dot with v (1 at row j, 0 above), v_i shuffled from lane jj.
    const float v0 = simd_shuffle(x[0], ushort(jj));
    float dot = (below0 ? v0 : (at0 ? 1.0f : 0.0f)) * x[0];
#pragma unroll
    for (int r = 1; r < R; ++r) {
      dot = fma(simd_shuffle(x[r], ushort(jj)), x[r], dot);
    }
    red[sg][lane] = dot;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float sum = 0.0f;
    for (int s = 0; s < PANEL_SIMDGROUPS; ++s) {
      sum += red[s][lane];
    }
    // Lane jj keeps its column (v itself); the shuffles stay outside any branch.
    const float f = lane > jj ? tau * sum : 0.0f;
    x[0] = fma(-f, below0 ? v0 : (at0 ? 1.0f : 0.0f), x[0]);
#pragma unroll
    for (int r = 1; r < R; ++r) {
      x[r] = fma(-f, simd_shuffle(x[r], ushort(jj)), x[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = k0 + sg + 32 * r;
    if (mine && i < m) {
      w[long(i) * n + c] = x[r];
    }
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  panel_t(w, Tb, taus, g, t, m, n, k0, b, mat, tid, lane, sg);
}

template [[host_name("qr_panel_regs4")]] kernel void qr_panel_regs<4>(
    device float*, device float*, constant Params&, uint3, uint, uint, uint);
template [[host_name("qr_panel_regs8")]] kernel void qr_panel_regs<8>(
    device float*, device float*, constant Params&, uint3, uint, uint, uint);

kernel void qr_vty(device const float* W [[buffer(0)]],
                   device const float* X [[buffer(1)]],
                   device float* Y [[buffer(2)]],
                   constant Params& p [[buffer(3)]],
                   uint3 group [[threadgroup_position_in_grid]],
                   uint tid_u [[thread_index_in_threadgroup]]) {
  threadgroup float vs[32][NB + 1];
  threadgroup float xs[32][64];
  const int m = p.m;
  const int n = p.n;
  const int k0 = p.k0;
  const int b = min(NB, n - k0);
  const int tid = int(tid_u);
  const long mat = long(group.x);
  device const float* w = W + mat * m * n;
  device const float* x = X + mat * m * n;
  const int cbase = p.c0 + 64 * int(group.y);
  const int tx = tid % 16;
  const int ty = tid / 16;
  float acc[2][4];
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 4; ++k) {
      acc[i][k] = 0.0f;
    }
  }
  for (int r0 = k0; r0 < m; r0 += 32) {
    for (int e = tid; e < 32 * NB; e += 256) {
      vs[e / NB][e % NB] = v_at(w, r0 + e / NB, e % NB, m, n, k0, b);
    }
    for (int e = tid; e < 32 * 64; e += 256) {
      const int row = r0 + e / 64;
      const int col = cbase + e % 64;
      xs[e / 64][e % 64] = (row < m && col < n) ? x[long(row) * n + col] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
#pragma unroll 4
    for (int r = 0; r < 32; ++r) {
      const float a0 = vs[r][2 * ty];
      const float a1 = vs[r][2 * ty + 1];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float xv = xs[r][tx + 16 * k];
        acc[0][k] = fma(a0, xv, acc[0][k]);
        acc[1][k] = fma(a1, xv, acc[1][k]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  device float* y = Y + mat * NB * n;
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 4; ++k) {
      const int col = cbase + tx + 16 * k;
      if (col < n) {
        y[long(2 * ty + i) * n + col] = acc[i][k];
      }
    }
  }
}

kernel void qr_apply(device const float* W [[buffer(0)]],
                     device float* X [[buffer(1)]],
                     device const float* Tb [[buffer(2)]],
                     device const float* Y [[buffer(3)]],
                     constant Params& p [[buffer(4)]],
                     uint3 group [[threadgroup_position_in_grid]],
                     uint tid_u [[thread_index_in_threadgroup]]) {
  threadgroup float ts[NB][NB + 1];
  threadgroup float ys[NB][64];
  threadgroup float zs[NB][64];
  threadgroup float vs[64][NB + 1];
  const int m = p.m;
  const int n = p.n;
  const int k0 = p.k0;
  const int b = min(NB, n - k0);
  const int tid = int(tid_u);
  const long mat = long(group.x);
  device const float* w = W + mat * m * n;
  device float* x = X + mat * m * n;
  const int col_tiles = (n - p.c0 + 63) / 64;
  const int rbase = k0 + 64 * (int(group.y) / col_tiles);
  const int cbase = p.c0 + 64 * (int(group.y) % col_tiles);
  device const float* tm = Tb + (mat * ((n + NB - 1) / NB) + k0 / NB) * NB * NB;
  device const float* y = Y + mat * NB * n;

  for (int e = tid; e < NB * NB; e += 256) {
    const int r = e / NB;
    const int q = e % NB;
    ts[r][q] = p.trans != 0 ? tm[q * NB + r] : tm[e];
  }
  for (int e = tid; e < NB * 64; e += 256) {
    const int col = cbase + e % 64;
    ys[e / 64][e % 64] = col < n ? y[long(e / 64) * n + col] : 0.0f;
  }
  for (int e = tid; e < 64 * NB; e += 256) {
    vs[e / NB][e % NB] = v_at(w, rbase + e / NB, e % NB, m, n, k0, b);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int tx = tid % 16;
  const int ty = tid / 16;
  // Z = op(T) Y for this column tile: rows 2 ty, 2 ty + 1.
  for (int i = 0; i < 2; ++i) {
    const int r = 2 * ty + i;
    float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int q = 0; q < NB; ++q) {
      const float tv = ts[r][q];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        z[k] = fma(tv, ys[q][tx + 16 * k], z[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      zs[r][tx + 16 * k] = z[k];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      acc[i][k] = 0.0f;
    }
  }
#pragma unroll 4
  for (int q = 0; q < NB; ++q) {
    float av[4];
    float bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      av[i] = vs[ty + 16 * i][q];
      bv[i] = zs[q][tx + 16 * i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        acc[i][k] = fma(av[i], bv[k], acc[i][k]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = rbase + ty + 16 * i;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int col = cbase + tx + 16 * k;
      if (row < m && col < n) {
        x[long(row) * n + col] -= acc[i][k];
      }
    }
  }
}
