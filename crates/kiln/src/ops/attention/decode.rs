//! Kernel sources of the decode path (split keys) and of the merge of its ranges.

/// 16-byte chunks of a key/value row as raw words, and their widening to f32: `E = 16 /
/// sizeof(T)` elements per chunk. `kiln_word` reads one word element by element (any alignment,
/// zero past `n`); the fast path reads a whole chunk as one `uint4`.
pub(super) const DECODE_HEADER: &str = r#"
inline uint kiln_word(const device float* p, int i, int n) {
    return i < n ? as_type<uint>(p[i]) : 0u;
}
template <typename T>
inline uint kiln_word(const device T* p, int i, int n) {
    vec<T, 2> h(2 * i < n ? p[2 * i] : T(0), 2 * i + 1 < n ? p[2 * i + 1] : T(0));
    return as_type<uint>(h);
}
template <typename T>
inline uint4 kiln_chunk(const device T* p, int c, int n, bool aligned) {
    if (aligned) {
        return ((const device uint4*)p)[c];
    }
    return uint4(kiln_word(p, 4 * c, n), kiln_word(p, 4 * c + 1, n), kiln_word(p, 4 * c + 2, n),
                 kiln_word(p, 4 * c + 3, n));
}
inline void kiln_widen(uint4 w, thread float* f, float) {
    for (int i = 0; i < 4; ++i) {
        f[i] = as_type<float>(w[i]);
    }
}
template <typename T>
inline void kiln_widen(uint4 w, thread float* f, T) {
    for (int i = 0; i < 4; ++i) {
        vec<T, 2> h = as_type<vec<T, 2>>(w[i]);
        f[2 * i] = static_cast<float>(h.x);
        f[2 * i + 1] = static_cast<float>(h.y);
    }
}
"#;

pub(super) const DECODE: &str = r#"
    // A stream is LPK lanes that score one key at a time, each lane owning CPL 16-byte chunks of
    // the head dimension; every stream keeps its own (m, l, acc) until the end of the range.
    constexpr int E = 16 / sizeof(T);
    constexpr int NC = (D + E - 1) / E;
    constexpr int CPL = (NC + LPK - 1) / LPK;
    constexpr int NSTREAM = SG * (32 / LPK);
    constexpr int STEP = NSTREAM * U;
    threadgroup float st_m[NSTREAM];
    threadgroup float st_l[NSTREAM];
    threadgroup float st_acc[NSTREAM * D];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int sg = static_cast<int>(simdgroup_index_in_threadgroup);
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int stream = sg * (32 / LPK) + lane / LPK;
    int sub = lane % LPK;
    int Hq = q_shape[1];
    int Tq = q_shape[2];
    int Hkv = k_shape[1];
    int Tk = k_shape[2];
    int split = static_cast<int>(threadgroup_position_in_grid.x);
    int n_splits = static_cast<int>(threadgroups_per_grid.x);
    int r = static_cast<int>(threadgroup_position_in_grid.y);
    int b = static_cast<int>(threadgroup_position_in_grid.z);
    int hq = r / Tq;
    int row = r % Tq;
    int hk = hq / (Hq / Hkv);
    int kend = Tk;
    if (MASK == 1) {
        kend = metal::clamp(row + Tk - Tq + 1, 0, Tk);
    }
    int k_lo = split * SPLIT_LEN;
    int k_hi = metal::min(kend, k_lo + SPLIT_LEN);
    const device T* kb = k + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* vb = v + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* qr = q + (static_cast<long>(b * Hq + hq) * Tq + row) * D;

    float qf[CPL][E];
    float acc[CPL][E];
    for (int cc = 0; cc < CPL; ++cc) {
        int c = metal::min(sub + cc * LPK, NC - 1);
        kiln_widen(kiln_chunk(qr, c, D, false), qf[cc], T(0));
        for (int e = 0; e < E; ++e) {
            qf[cc][e] = sub + cc * LPK < NC ? qf[cc][e] : 0.0f;
            acc[cc][e] = 0.0f;
        }
    }
    float m = -1e30f;
    float l = 0.0f;
    // The loop bounds are uniform over the threadgroup; keys past the range are clamped loads
    // whose scores are masked to -inf.
    for (int base = k_lo; base < k_hi; base += STEP) {
        uint4 kw[U][CPL];
        uint4 vw[U][CPL];
        for (int u = 0; u < U; ++u) {
            int kc = metal::min(base + u * NSTREAM + stream, k_hi - 1);
            for (int cc = 0; cc < CPL; ++cc) {
                int c = metal::min(sub + cc * LPK, NC - 1);
                kw[u][cc] = kiln_chunk(kb + static_cast<long>(kc) * D, c, D, VEC == 1);
                vw[u][cc] = kiln_chunk(vb + static_cast<long>(kc) * D, c, D, VEC == 1);
            }
        }
        float s[U];
        float s_max = -INFINITY;
        for (int u = 0; u < U; ++u) {
            float dot = 0.0f;
            for (int cc = 0; cc < CPL; ++cc) {
                float kf[E];
                kiln_widen(kw[u][cc], kf, T(0));
                for (int e = 0; e < E; ++e) {
                    dot += qf[cc][e] * kf[e];
                }
            }
            for (int o = LPK / 2; o > 0; o /= 2) {
                dot += simd_shuffle_xor(dot, static_cast<ushort>(o));
            }
            int key = base + u * NSTREAM + stream;
            float x = dot * scale;
            if (MASK == 2) {
                int kc = metal::min(key, k_hi - 1);
                x += static_cast<float>(mask[b * mstr[0] + hq * mstr[1] + row * mstr[2] + kc * mstr[3]]);
            }
            s[u] = metal::select(-INFINITY, x, key < k_hi);
            s_max = metal::max(s_max, s[u]);
        }
        float m_new = metal::max(m, s_max);
        float corr = metal::exp(m - m_new);
        l *= corr;
        for (int cc = 0; cc < CPL; ++cc) {
            for (int e = 0; e < E; ++e) {
                acc[cc][e] *= corr;
            }
        }
        for (int u = 0; u < U; ++u) {
            float p = metal::exp(s[u] - m_new);
            l += p;
            for (int cc = 0; cc < CPL; ++cc) {
                float vf[E];
                kiln_widen(vw[u][cc], vf, T(0));
                for (int e = 0; e < E; ++e) {
                    acc[cc][e] += p * vf[e];
                }
            }
        }
        m = m_new;
    }
    if (sub == 0) {
        st_m[stream] = m;
        st_l[stream] = l;
    }
    for (int cc = 0; cc < CPL; ++cc) {
        for (int e = 0; e < E; ++e) {
            int d = (sub + cc * LPK) * E + e;
            if (d < D) {
                st_acc[stream * D + d] = acc[cc][e];
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float gm = -1e30f;
    for (int s = 0; s < NSTREAM; ++s) {
        gm = metal::max(gm, st_m[s]);
    }
    long pbase = (static_cast<long>(b) * Hq * Tq + r) * n_splits + split;
    for (int d = tid; d < D; d += SG * 32) {
        float num = 0.0f;
        for (int s = 0; s < NSTREAM; ++s) {
            num += st_acc[s * D + d] * metal::exp(st_m[s] - gm);
        }
        part_acc[pbase * D + d] = num;
    }
    if (tid == 0) {
        float den = 0.0f;
        for (int s = 0; s < NSTREAM; ++s) {
            den += st_l[s] * metal::exp(st_m[s] - gm);
        }
        part_ml[2 * pbase] = gm;
        part_ml[2 * pbase + 1] = den;
    }
"#;

pub(super) const COMBINE: &str = r#"
    int d = static_cast<int>(thread_position_in_grid.x);
    long r = thread_position_in_grid.y;
    int D = part_acc_shape[2];
    int NS = part_acc_shape[1];
    const device float* ml = part_ml + r * NS * 2;
    float gm = -1e30f;
    for (int s = 0; s < NS; ++s) {
        gm = metal::max(gm, ml[2 * s]);
    }
    float num = 0.0f;
    float den = 0.0f;
    for (int s = 0; s < NS; ++s) {
        float w = metal::exp(ml[2 * s] - gm);
        num += part_acc[(r * NS + s) * D + d] * w;
        den += ml[2 * s + 1] * w;
    }
    out[r * D + d] = static_cast<T>(den > 0.0f ? num / den : 0.0f);
"#;
