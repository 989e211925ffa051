#include <metal_stdlib>
using namespace metal;

// Gated delta net, chunk_scaled_dot_kkt. For batch b, value head h and chunk c of BT tokens:
//   A[b, t0+i, h, j] = (i > j) ? exp(g_i - g_j) * sum_k kb[i, k] * k[j, k] : 0,
//   kb[i, k] = KT(k[i, k] * beta_i)   (rounded to the input dtype before the dot product),
// with k read from the key head h / (H / Hg). Rows past the sequence end (a partial last
// chunk) are neither read nor written; columns past it are zero.

constant uint BT = 32;  // tokens per chunk (A's last axis)
constant uint BK = 32;  // width of one staged K tile

template <typename KT>
kernel void gdn_kkt(
    device const KT* k [[buffer(0)]],       // [B, T, Hg, K]
    device const float* beta [[buffer(1)]], // [B, T, H]
    device const float* g [[buffer(2)]],    // [B, T, H], cumulative log gates
    device float* A [[buffer(3)]],          // [B, T, H, BT]
    constant uint* params [[buffer(4)]],    // B, T, Hg, H, K
    threadgroup KT* kb [[threadgroup(0)]],  // [BT, BK]
    threadgroup float* acc [[threadgroup(1)]], // [BT, BT]
    uint3 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint3 group_size [[threads_per_threadgroup]]) {
  const uint T = params[1];
  const uint Hg = params[2];
  const uint H = params[3];
  const uint K = params[4];
  const uint i_t = group.x;
  const uint i_h = group.y;
  const uint i_b = group.z;
  const uint n = group_size.x;
  const uint t0 = i_t * BT;
  const uint valid = min(BT, T - t0);
  const uint token_stride = Hg * K;
  device const KT* kc = k + (i_b * T + t0) * token_stride + (i_h / (H / Hg)) * K;
  device const float* beta_c = beta + (i_b * T + t0) * H + i_h;
  device const float* g_c = g + (i_b * T + t0) * H + i_h;

  for (uint c = tid; c < BT * BT; c += n) {
    acc[c] = 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  for (uint k0 = 0; k0 < K; k0 += BK) {
    const uint w = min(BK, K - k0);
    for (uint c = tid; c < BT * BK; c += n) {
      const uint r = c / BK;
      const uint col = c % BK;
      float v = 0.0f;
      if (r < valid && col < w) {
        v = float(kc[r * token_stride + k0 + col]) * beta_c[r * H];
      }
      kb[c] = KT(v);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint c = tid; c < BT * BT; c += n) {
      const uint i = c / BT;
      const uint j = c % BT;
      if (j < i && i < valid) {
        float dot = 0.0f;
        for (uint kk = 0; kk < w; ++kk) {
          dot += float(kb[i * BK + kk]) * float(kc[j * token_stride + k0 + kk]);
        }
        acc[c] += dot;
      }
    }
    // The next tile overwrites kb, so every thread must be done reading it.
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  for (uint c = tid; c < valid * BT; c += n) {
    const uint i = c / BT;
    const uint j = c % BT;
    const float v = j < i ? acc[c] * exp(g_c[i * H] - g_c[j * H]) : 0.0f;
    A[((i_b * T + t0 + i) * H + i_h) * BT + j] = v;
  }
}

template [[host_name("gdn_kkt_f32")]] [[kernel]] decltype(gdn_kkt<float>) gdn_kkt<float>;
template [[host_name("gdn_kkt_f16")]] [[kernel]] decltype(gdn_kkt<half>) gdn_kkt<half>;
template [[host_name("gdn_kkt_bf16")]] [[kernel]] decltype(gdn_kkt<bfloat>) gdn_kkt<bfloat>;
