#include <metal_stdlib>
using namespace metal;

// Right-looking blocked Cholesky of a batch of n x n matrices, in place in W, block width NB.
// Per block column k0 (b = min(NB, n - k0) columns, trailing rows from s = k0 + b):
//   chol_panel:  every threadgroup factors the diagonal block W[k0:k0+b, k0:k0+b] in
//                threadgroup memory, then solves its rows of the panel, L21 = A21 L11^-T;
//                the first one writes L11 to the scratch D and the failure flag.
//   chol_update: W[s:, s:] -= L21 L21^T on the lower triangle, 64 x 64 tiles; one extra
//                threadgroup per matrix copies L11 from D into W (nothing else reads that block).

constant int NB = 64;
constant int PANEL_ROWS = 128;  // threads (and panel rows) per chol_panel threadgroup
constant int TILE = 64;         // chol_update output tile, 256 threads of 4 x 4

struct Params {
  int n;   // matrix size
  int k0;  // first column of the block
};

// W = the lower triangle of A (upper zeros); flags cleared.
kernel void chol_copy(device const float* A [[buffer(0)]],
                      device float* W [[buffer(1)]],
                      device int* info [[buffer(2)]],
                      device float* D [[buffer(3)]],
                      constant Params& p [[buffer(4)]],
                      constant uint& count [[buffer(5)]],
                      uint gid [[thread_position_in_grid]]) {
  const uint nn = uint(p.n) * uint(p.n);
  const uint e = gid % nn;
  const uint i = e / uint(p.n);
  const uint c = e % uint(p.n);
  W[gid] = c <= i ? A[gid] : 0.0f;
  if (gid < count) {
    info[gid] = 0;
  }
}

kernel void chol_panel(device float* W [[buffer(0)]],
                       device int* info [[buffer(1)]],
                       device float* D [[buffer(2)]],
                       constant Params& p [[buffer(3)]],
                       uint3 group [[threadgroup_position_in_grid]],
                       uint tid_u [[thread_index_in_threadgroup]]) {
  threadgroup float d[NB][NB + 1];
  const int n = p.n;
  const int k0 = p.k0;
  const int b = min(NB, n - k0);
  const int tid = int(tid_u);
  const long m = long(group.x);
  device float* w = W + m * n * n;

  // The diagonal block, padded with the identity to NB x NB so every loop below is uniform.
  for (int e = tid; e < NB * NB; e += PANEL_ROWS) {
    const int i = e / NB;
    const int c = e % NB;
    float v = i == c ? 1.0f : 0.0f;
    if (i < b && c <= i) {
      v = w[long(k0 + i) * n + k0 + c];
    }
    d[i][c] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // Unblocked right-looking factorisation: thread tid owns column tid % NB of the update.
  int failed = 0;
  const int col = tid % NB;
  const int row0 = tid / NB;
  for (int j = 0; j < NB; ++j) {
    const float piv = d[j][j];
    failed = (failed == 0 && j < b && !(piv > 0.0f)) ? j + 1 : failed;
    const float s = sqrt(piv);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (col > j) {
      // Each thread scales the entry it reads right after: column j, row col.
      if (row0 == 0) {
        d[col][j] = d[col][j] / s;
      }
    } else if (col == j && row0 == 0) {
      d[j][j] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (col > j) {
      const float lcj = d[col][j];
      for (int i = col + row0; i < NB; i += PANEL_ROWS / NB) {
        d[i][col] = fma(-d[i][j], lcj, d[i][col]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  if (group.y == 0) {
    device float* dm = D + m * NB * NB;
    for (int e = tid; e < NB * NB; e += PANEL_ROWS) {
      const int i = e / NB;
      const int c = e % NB;
      dm[e] = c <= i ? d[i][c] : 0.0f;
    }
    if (tid == 0 && failed != 0 && info[m] == 0) {
      info[m] = k0 + failed;
    }
  }

  // One panel row per thread: x L11^T = a, forward substitution in registers.
  const int r = k0 + b + int(group.y) * PANEL_ROWS + tid;
  if (r < n) {
    device float* row = w + long(r) * n + k0;
    float x[NB];
#pragma unroll
    for (int q = 0; q < NB; ++q) {
      x[q] = q < b ? row[q] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      float v = x[j];
#pragma unroll
      for (int q = 0; q < j; ++q) {
        v = fma(-x[q], d[j][q], v);
      }
      x[j] = v / d[j][j];
    }
#pragma unroll
    for (int q = 0; q < NB; ++q) {
      if (q < b) {
        row[q] = x[q];
      }
    }
  }
}

static inline float panel_at(device const float* w, int row, int q, int n, int k0, int b) {
  return (row < n && q < b) ? w[long(row) * n + k0 + q] : 0.0f;
}

kernel void chol_update(device float* W [[buffer(0)]],
                        device const float* D [[buffer(1)]],
                        constant Params& p [[buffer(2)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint tid_u [[thread_index_in_threadgroup]]) {
  // 32 KiB together, Metal's limit; the float4 index is XOR-swizzled by q (below) so that the
  // staging stores of consecutive q fall in different banks without padding rows.
  threadgroup float4 As[NB][TILE / 4];
  threadgroup float4 Bs[NB][TILE / 4];
  const int n = p.n;
  const int k0 = p.k0;
  const int b = min(NB, n - k0);
  const int s = k0 + b;
  const int tiles = (n - s + TILE - 1) / TILE;
  const int pairs = tiles * (tiles + 1) / 2;
  const int tid = int(tid_u);
  const long m = long(group.x);
  device float* w = W + m * n * n;
  const int l = int(group.y);

  if (l >= pairs) {
    // The factored diagonal block into place (its upper part is already zero).
    device const float* dm = D + m * NB * NB;
    for (int e = tid; e < NB * NB; e += 256) {
      const int i = e / NB;
      const int c = e % NB;
      if (i < b && c <= i) {
        w[long(k0 + i) * n + k0 + c] = dm[e];
      }
    }
    return;
  }

  // Tile pair (ti, tj), tj <= ti, from the linear index l = ti (ti + 1) / 2 + tj.
  int ti = int((sqrt(8.0f * float(l) + 1.0f) - 1.0f) * 0.5f);
  while (ti * (ti + 1) / 2 > l) {
    --ti;
  }
  while ((ti + 1) * (ti + 2) / 2 <= l) {
    ++ti;
  }
  const int tj = l - ti * (ti + 1) / 2;
  const int r0 = s + ti * TILE;
  const int c0 = s + tj * TILE;

  // Stage the two panel slices transposed: As[q][g ^ (q % 16)] = rows r0 + 4g .. r0 + 4g + 3 of
  // column q.
  {
    const int q = tid % NB;
    for (int g = tid / NB; g < TILE / 4; g += 256 / NB) {
      const int ra = r0 + 4 * g;
      const int rb = c0 + 4 * g;
      As[q][g ^ (q % 16)] = float4(panel_at(w, ra, q, n, k0, b), panel_at(w, ra + 1, q, n, k0, b),
                        panel_at(w, ra + 2, q, n, k0, b), panel_at(w, ra + 3, q, n, k0, b));
      Bs[q][g ^ (q % 16)] = float4(panel_at(w, rb, q, n, k0, b), panel_at(w, rb + 1, q, n, k0, b),
                        panel_at(w, rb + 2, q, n, k0, b), panel_at(w, rb + 3, q, n, k0, b));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const int tx = tid % 16;
  const int ty = tid / 16;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      acc[i][c] = 0.0f;
    }
  }
#pragma unroll 8
  for (int q = 0; q < NB; ++q) {
    const float4 a4 = As[q][ty ^ (q % 16)];
    const float4 b4 = Bs[q][tx ^ (q % 16)];
    const float av[4] = {a4.x, a4.y, a4.z, a4.w};
    const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[i][c] = fma(av[i], bv[c], acc[i][c]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = r0 + 4 * ty + i;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int cc = c0 + 4 * tx + c;
      if (row < n && cc <= row) {
        w[long(row) * n + cc] -= acc[i][c];
      }
    }
  }
}
