//! Kernel sources of the two prefill paths; the launch rule and shapes live in the parent.

pub(super) const PREFILL: &str = r#"
    constexpr int DPL = (D + 31) / 32;
    constexpr int KS = D + 1;
    constexpr int SPLIT = 32 / BK;
    constexpr int K_TILE = BK * KS;
    constexpr int V_TILE = BK * D;
    constexpr int Q_TILE = BQ * D;
    threadgroup T k_s[K_TILE];
    threadgroup T v_s[V_TILE];
    threadgroup float q_s[Q_TILE];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int n_threads = static_cast<int>(threads_per_threadgroup.x);
    int sg = static_cast<int>(simdgroup_index_in_threadgroup);
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int Hq = q_shape[1];
    int Tq = q_shape[2];
    int Hkv = k_shape[1];
    int Tk = k_shape[2];
    int b = static_cast<int>(threadgroup_position_in_grid.z);
    int hq = static_cast<int>(threadgroup_position_in_grid.y);
    int hk = hq / (Hq / Hkv);
    int q0 = static_cast<int>(threadgroup_position_in_grid.x) * BQ;
    int row = q0 + sg;
    bool live = row < Tq;
    int shift = Tk - Tq;
    int kend = Tk;
    int kend_row = Tk;
    if (MASK == 1) {
        kend = metal::clamp(metal::min(q0 + BQ, Tq) + shift, 0, Tk);
        kend_row = metal::clamp(row + shift + 1, 0, Tk);
    }
    const device T* kb = k + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* vb = v + static_cast<long>(b * Hkv + hk) * Tk * D;
    for (int e = tid; e < BQ * D; e += n_threads) {
        int r = q0 + e / D;
        q_s[e] = r < Tq ? static_cast<float>(q[(static_cast<long>(b * Hq + hq) * Tq + r) * D + e % D]) : 0.0f;
    }

    float acc[DPL];
    for (int c = 0; c < DPL; ++c) {
        acc[c] = 0.0f;
    }
    float m = -1e30f;
    float l = 0.0f;
    for (int t0 = 0; t0 < kend; t0 += BK) {
        int nk = metal::min(BK, kend - t0);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int e = tid; e < BK * D; e += n_threads) {
            int r = e / D;
            int c = e % D;
            T kv = T(0);
            T vv = T(0);
            if (r < nk) {
                kv = kb[static_cast<long>(t0 + r) * D + c];
                vv = vb[static_cast<long>(t0 + r) * D + c];
            }
            k_s[r * KS + c] = kv;
            v_s[r * D + c] = vv;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (live) {
            // Lane-dependent choices are selects, not branches, up to the collectives.
            int j = lane % BK;
            int part = lane / BK;
            int key = t0 + j;
            float s = 0.0f;
            for (int d = part; d < D; d += SPLIT) {
                s += q_s[sg * D + d] * static_cast<float>(k_s[j * KS + d]);
            }
            for (int o = BK; o < 32; o *= 2) {
                s += simd_shuffle_xor(s, static_cast<ushort>(o));
            }
            s *= scale;
            bool valid = j < nk && key < kend_row;
            if (MASK == 2) {
                int kc = metal::min(key, Tk - 1);
                s += static_cast<float>(mask[b * mstr[0] + hq * mstr[1] + row * mstr[2] + kc * mstr[3]]);
            }
            s = metal::select(-INFINITY, s, valid);
            float m_new = metal::max(m, simd_max(s));
            float p = metal::exp(s - m_new);
            float corr = metal::exp(m - m_new);
            l = l * corr + simd_sum(metal::select(0.0f, p, part == 0));
            for (int c = 0; c < DPL; ++c) {
                acc[c] *= corr;
            }
            for (int jj = 0; jj < nk; ++jj) {
                float pj = simd_shuffle(p, static_cast<ushort>(jj));
                for (int c = 0; c < DPL; ++c) {
                    int d = metal::min(c * 32 + lane, D - 1);
                    acc[c] += pj * static_cast<float>(v_s[jj * D + d]);
                }
            }
            m = m_new;
        }
    }
    if (live) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < DPL; ++c) {
            int d = c * 32 + lane;
            if (d < D) {
                out[(static_cast<long>(b * Hq + hq) * Tq + row) * D + d] = static_cast<T>(acc[c] * inv);
            }
        }
    }
"#;

/// Four elements widened to f32 from chunk `c` of row `p`: one vector load when `aligned`.
pub(super) const TILED_HEADER: &str = r#"
template <typename T>
inline float4 kiln_load4v(const device T* p, int c, bool aligned) {
    if (aligned) {
        vec<T, 4> v = ((const device vec<T, 4>*)p)[c];
        return float4(static_cast<float>(v.x), static_cast<float>(v.y), static_cast<float>(v.z), static_cast<float>(v.w));
    }
    return float4(static_cast<float>(p[4 * c]), static_cast<float>(p[4 * c + 1]), static_cast<float>(p[4 * c + 2]),
                  static_cast<float>(p[4 * c + 3]));
}
"#;

pub(super) const PREFILL_TILED: &str = r#"
    // 64 threads, 32 queries × 32 keys per tile: thread (qg, kg) = (tid / 8, tid % 8) owns the
    // scores of queries 4qg.. and keys 4kg.., and the outputs of queries 4qg.. at dimensions
    // 4kg + 32j... Q and K are staged transposed (d-major) so each step of the score loop is
    // two float4 reads for 16 products; the key tile's buffer is reused for the value tile.
    constexpr int TQ = 32;
    constexpr int TK = 32;
    constexpr int DC = D / 4;
    constexpr int DJ = D / 32;
    threadgroup float4 qt[D * TQ / 4];
    threadgroup float4 kv[D * TK / 4];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int qg = tid / 8;
    int kg = tid % 8;
    int gbase = lane - lane % 8;
    int rr = tid % 32;
    int part = tid / 32;
    int Hq = q_shape[1];
    int Tq = q_shape[2];
    int Hkv = k_shape[1];
    int Tk = k_shape[2];
    int b = static_cast<int>(threadgroup_position_in_grid.z);
    int hq = static_cast<int>(threadgroup_position_in_grid.y);
    int hk = hq / (Hq / Hkv);
    // The longest (causal) query tiles start first, so the last wave is short.
    int tile = static_cast<int>(threadgroups_per_grid.x) - 1 - static_cast<int>(threadgroup_position_in_grid.x);
    int q0 = tile * TQ;
    int shift = Tk - Tq;
    int kend = Tk;
    if (MASK == 1) {
        kend = metal::clamp(metal::min(q0 + TQ, Tq) + shift, 0, Tk);
    }
    const device T* qb = q + static_cast<long>(b * Hq + hq) * Tq * D;
    const device T* kb = k + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* vb = v + static_cast<long>(b * Hkv + hk) * Tk * D;
    {
        int qrow = metal::min(q0 + rr, Tq - 1);
        bool ok = q0 + rr < Tq;
        for (int dc = part; dc < DC; dc += 2) {
            float4 f = kiln_load4v(qb + static_cast<long>(qrow) * D, dc, VEC == 1);
            for (int i = 0; i < 4; ++i) {
                qt[(dc * 4 + i) * (TQ / 4) + rr / 4][rr % 4] = ok ? f[i] : 0.0f;
            }
        }
    }
    float4 acc[4][DJ];
    float m[4];
    float l[4];
    for (int i = 0; i < 4; ++i) {
        m[i] = -1e30f;
        l[i] = 0.0f;
        for (int j = 0; j < DJ; ++j) {
            acc[i][j] = float4(0.0f);
        }
    }
    for (int t0 = 0; t0 < kend; t0 += TK) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        {
            int key = metal::min(t0 + rr, Tk - 1);
            bool ok = t0 + rr < Tk;
            for (int dc = part; dc < DC; dc += 2) {
                float4 f = kiln_load4v(kb + static_cast<long>(key) * D, dc, VEC == 1);
                for (int i = 0; i < 4; ++i) {
                    kv[(dc * 4 + i) * (TK / 4) + rr / 4][rr % 4] = ok ? f[i] : 0.0f;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float s[4][4];
        for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) {
                s[i][j] = 0.0f;
            }
        }
        for (int d = 0; d < D; ++d) {
            float4 a = qt[d * (TQ / 4) + qg];
            float4 c = kv[d * (TK / 4) + kg];
            for (int i = 0; i < 4; ++i) {
                for (int j = 0; j < 4; ++j) {
                    s[i][j] += a[i] * c[j];
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int e = tid; e < TK * DC; e += 64) {
            int r = e / DC;
            float4 f = kiln_load4v(vb + static_cast<long>(metal::min(t0 + r, Tk - 1)) * D, e % DC, VEC == 1);
            kv[e] = t0 + r < Tk ? f : float4(0.0f);
        }
        for (int i = 0; i < 4; ++i) {
            int row = q0 + qg * 4 + i;
            float mx = -INFINITY;
            for (int j = 0; j < 4; ++j) {
                int key = t0 + kg * 4 + j;
                float x = s[i][j] * scale;
                if (MASK == 2) {
                    int rc = metal::min(row, Tq - 1);
                    int kc = metal::min(key, Tk - 1);
                    x += static_cast<float>(mask[b * mstr[0] + hq * mstr[1] + rc * mstr[2] + kc * mstr[3]]);
                }
                bool valid = key < Tk && (MASK != 1 || key <= row + shift);
                s[i][j] = metal::select(-INFINITY, x, valid);
                mx = metal::max(mx, s[i][j]);
            }
            for (int o = 1; o < 8; o *= 2) {
                mx = metal::max(mx, simd_shuffle_xor(mx, static_cast<ushort>(o)));
            }
            float m_new = metal::max(m[i], mx);
            float corr = metal::exp(m[i] - m_new);
            m[i] = m_new;
            l[i] *= corr;
            for (int j = 0; j < DJ; ++j) {
                acc[i][j] *= corr;
            }
            for (int j = 0; j < 4; ++j) {
                s[i][j] = metal::exp(s[i][j] - m_new);
                l[i] += s[i][j];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int kq = 0; kq < TK / 4; ++kq) {
            for (int c = 0; c < 4; ++c) {
                float p[4];
                for (int i = 0; i < 4; ++i) {
                    p[i] = simd_shuffle(s[i][c], static_cast<ushort>(gbase + kq));
                }
                int kr = kq * 4 + c;
                for (int j = 0; j < DJ; ++j) {
                    float4 vv = kv[kr * DC + kg + 8 * j];
                    for (int i = 0; i < 4; ++i) {
                        acc[i][j] += p[i] * vv;
                    }
                }
            }
        }
    }
    for (int i = 0; i < 4; ++i) {
        float lt = l[i];
        for (int o = 1; o < 8; o *= 2) {
            lt += simd_shuffle_xor(lt, static_cast<ushort>(o));
        }
        float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        int row = q0 + qg * 4 + i;
        if (row < Tq) {
            device T* o = out + (static_cast<long>(b * Hq + hq) * Tq + row) * D;
            for (int j = 0; j < DJ; ++j) {
                for (int e = 0; e < 4; ++e) {
                    o[(kg + 8 * j) * 4 + e] = static_cast<T>(acc[i][j][e] * inv);
                }
            }
        }
    }
"#;
