    // Body of the warpgroup prefill (layout, roles and schedule: prefill_wgmma.rs).
    using namespace kiln_sdpa;
    constexpr int BM = 64 * NC;        // queries of a tile
    constexpr int QWG = 64 * HD * 2;   // bytes of one consumer's query (or output) rows
    constexpr int TBYTES = BN * HD * 2; // bytes of one key or value tile
    constexpr int CB = HD / 64;        // 64-column blocks of a row
    static_assert(HD == 128 || HD == 64, "P V is m64n64 or m64n128");
    constexpr int OACC = HD / 2;       // P V accumulators of a thread
    extern __shared__ __align__(1024) uint4 kiln_wg_smem[];
    // q_full, q_empty, k_full[stage], v_full[stage], tile_full[slot], tile_empty[slot],
    // k_empty[stage], v_empty[stage]
    __shared__ __align__(8) unsigned long long kiln_bars[14];
    __shared__ int kiln_tile_slot[2];
    // Per consumer, how many parts of a split tile had finished before its own (see below).
    __shared__ unsigned kiln_parts_done[NC];
    const unsigned base = (smem_u32(kiln_wg_smem) + 1023u) & ~1023u;
    const unsigned sq = base;
    const unsigned sk = sq + NC * QWG;
    const unsigned sv = sk + 2 * TBYTES;
    const unsigned so = sv + 2 * TBYTES;
    const unsigned q_full = smem_u32(kiln_bars);
    const unsigned q_empty = q_full + 8;
    auto k_full = [&](int s) { return q_full + 8 * (2 + s); };
    auto v_full = [&](int s) { return q_full + 8 * (4 + s); };
    auto tile_full = [&](int s) { return q_full + 8 * (6 + s); };
    auto tile_empty = [&](int s) { return q_full + 8 * (8 + s); };
    auto k_empty = [&](int s) { return q_full + 8 * (10 + s); };
    auto v_empty = [&](int s) { return q_full + 8 * (12 + s); };
    const int tid = threadIdx.x;
    const int Hq = q_shape[1];
    const int Tq = q_shape[2];
    const int Hkv = k_shape[1];
    const int Tk = k_shape[2];
    const int shift = Tk - Tq;
    const int nm = (Tq + BM - 1) / BM;
    const int heads = q_shape[0] * Hq;
    const int total = heads * nm;
    // The schedule after the tensor maps: the item counter, the number of split tiles (the
    // last ones), the parts each is split into over its key tiles, the number of last heads
    // whose tiles go longest first, then one counter of finished parts per split tile and
    // consumer (all zero at the launch but the three counts).
    const unsigned* schedule = reinterpret_cast<const unsigned*>(maps + 384);
    const int split = static_cast<int>(schedule[1]);
    const int parts = static_cast<int>(schedule[2]);
    const int last_heads = static_cast<int>(schedule[3]);
    // Tile t: (batch, head) t / nm, query tiles of a head from the last (the longest under the
    // causal mask) to the first, so the running tiles share few heads' keys and values in the
    // L2; the tiles of the last `last_heads` heads (from tile `lpt`) longest first across those
    // heads, so the blocks end together.
    const int lpt = total - last_heads * nm;
    auto first_query = [&](int t) { return (nm - 1 - (t >= lpt ? (t - lpt) / last_heads : t % nm)) * BM; };
    auto head_of = [&](int t) { return t >= lpt ? heads - last_heads + (t - lpt) % last_heads : t / nm; };
    // The (batch, key head) pair whose keys and values (batch, query head) pair hb reads.
    auto kv_head_of = [&](int hb) { return (hb / Hq) * Hkv + (hb % Hq) / (Hq / Hkv); };
    const int whole = total - split;
    const int items = whole + split * parts;
    // Item u: tile u whole, or past the whole tiles part (u - whole) % parts of a split tile,
    // whose key tiles [p·K / parts, (p + 1)·K / parts) of its K it takes.
    auto tile_of = [&](int u) { return u < whole ? u : whole + (u - whole) / parts; };
    auto keys_from = [&](int u, int K) { return u < whole ? 0 : ((u - whole) % parts) * K / parts; };
    auto keys_to = [&](int u, int K) { return u < whole ? K : ((u - whole) % parts + 1) * K / parts; };
    // Key tiles consumer c uses in a tile starting at query q0 (causal: up to its last visible
    // key; none when its rows all lie past the queries, as in the last tile of a head whose
    // length is not a multiple of BM). Later consumers' queries come later, so the last
    // consumer with queries uses the most, and the tile's key tiles are its.
    auto tiles_of = [&](int q0, int c) {
        const int w = q0 + 64 * c;
        if (w >= Tq) {
            return 0;
        }
        const int end = CAUSAL ? min(max(min(w + 64, Tq) + shift, 0), Tk) : Tk;
        return (end + BN - 1) / BN;
    };
    auto tile_tiles = [&](int q0) { return tiles_of(q0, min(NC - 1, (Tq - 1 - q0) / 64)); };
    if (tid == 0) {
        kiln_tma::bar_init(q_full, 1);
        kiln_tma::bar_init(q_empty, 4 * NC);
        for (int s = 0; s < 2; ++s) {
            kiln_tma::bar_init(k_full(s), 1);
            kiln_tma::bar_init(v_full(s), 1);
            kiln_tma::bar_init(tile_full(s), 1);
            kiln_tma::bar_init(tile_empty(s), 4 * NC);
            kiln_tma::bar_init(k_empty(s), 4 * NC);
            kiln_tma::bar_init(v_empty(s), 4 * NC);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid < 128) {
        // The producer gives registers back to the pool that the consumers then take from
        // (`registers` on the host side checks that the pool covers them).
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS) : "memory");
        if (tid == 0) {
            const unsigned char* qmap = maps;
            const unsigned char* kmap = maps + 128;
            const unsigned char* vmap = maps + 256;
            unsigned* next_tile = reinterpret_cast<unsigned*>(const_cast<unsigned char*>(maps) + 384);
            kiln_tma::acquire_map(qmap);
            kiln_tma::acquire_map(kmap);
            kiln_tma::acquire_map(vmap);
            // Loads so far: load n of a key or value tile goes to stage n & 1, which it takes over
            // from load n - 2 once every consumer released that one.
            unsigned loads = 0;
            int u = blockIdx.x;
            for (unsigned i = 0;; ++i) {
                // Publish the tile (or the end) to the consumers.
                if (i >= 2) {
                    kiln_tma::wait(tile_empty(i & 1), ((i >> 1) - 1) & 1);
                }
                int old;
                asm volatile("atom.shared.exch.b32 %0, [%1], %2;\n"
                             : "=r"(old)
                             : "r"(smem_u32(kiln_tile_slot) + 4 * (i & 1)), "r"(u)
                             : "memory");
                kiln_tma::arrive(tile_full(i & 1));
                if (u >= items) {
                    break;
                }
                const int t = tile_of(u);
                const int hb = head_of(t);
                const int q0 = first_query(t);
                const int kt = tile_tiles(q0);
                // The query rows, once every consumer's last S of the previous tile completed.
                if (i >= 1) {
                    kiln_tma::wait(q_empty, (i - 1) & 1);
                }
                kiln_tma::expect_bytes(q_full, NC * QWG);
                for (int w = 0; w < NC; ++w) {
                    for (int cb = 0; cb < CB; ++cb) {
                        kiln_tma::load_box(sq + w * QWG + cb * (64 * 128), qmap, cb * 64, q0 + 64 * w, hb, q_full);
                    }
                }
                const int kv = kv_head_of(hb);
                auto load_tile = [&](int j, unsigned full, auto empty, unsigned dst, unsigned stride, const unsigned char* map) {
                    const int s = loads & 1;
                    if (loads >= 2) {
                        kiln_tma::wait(empty(s), ((loads >> 1) - 1) & 1);
                    }
                    kiln_tma::expect_bytes(full, TBYTES);
                    for (int cb = 0; cb < CB; ++cb) {
                        kiln_tma::load_box(dst + s * stride + cb * (BN * 128), map, cb * 64, j * BN, kv, full);
                    }
                };
#pragma unroll 1
                for (int j = keys_from(u, kt); j < keys_to(u, kt); ++j) {
                    load_tile(j, k_full(loads & 1), k_empty, sk, TBYTES, kmap);
                    load_tile(j, v_full(loads & 1), v_empty, sv, TBYTES, vmap);
                    ++loads;
                }
                u = static_cast<int>(atomicAdd(next_tile, 1u)) + static_cast<int>(gridDim.x);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS) : "memory");
    // The consumer's index, from lane 0 so the compiler sees it warp-uniform: every `wgmma`
    // below sits on a path that depends only on uniform values, which keeps the products
    // asynchronous.
    const int cw = __shfl_sync(0xffffffffu, (tid >> 7) - 1, 0);
    const int wt = tid & 127;
    const int warp = wt >> 5;
    const int lane = tid & 31;
    const unsigned sqw = sq + cw * QWG;
    // Matrix descriptors of this consumer's query rows and of the first key and value stages;
    // each product step adds its byte offset to them.
    const unsigned long long dq = kiln_wg::desc(sqw, 16, 1024);
    const unsigned long long dk = kiln_wg::desc(sk, 16, 1024);
    const unsigned long long dv = kiln_wg::desc(sv, BN * 128, 1024);
    const unsigned sow = so + cw * QWG;
    const float NEG_INF = neg_inf();
    const float HIDE = NEG ? -NEG_INF : NEG_INF;
    auto extreme = [](float a, float b) { return NEG ? fminf(a, b) : fmaxf(a, b); };
    const float sl2 = scale[0] * 1.4426950408889634f;
    const int rl = 16 * warp + (lane >> 2);
    float o[OACC];
    float s[BN / 2];
    float m[2];
    float l[2];
    float corr[2] = {0.0f, 0.0f};
    // Per row, the exponent bias -m·c (0 while m = HIDE) and the score past which the largest
    // exponent would grow by more than GROW (m + GROW / c; NaN under a zero scale, where it
    // never grows), both set where m is.
    float mb[2];
    float grow_at[2];
    // Whether the last softmax moved the row extremes (O then needs its correction).
    bool rescaling = true;
    // Whether both rows of every thread of the warp hold a finite extreme (from the first key
    // tile on, unless a row's scores are all infinite or NaN): only then are a key tile's
    // exponents formed against the kept extremes before its own extremes are known.
    bool settled = false;
    // The growth of the largest exponent (base 2) under which the extremes stay: p <= 2^GROW,
    // far inside the f32 and 16-bit ranges, P's rounding relative as before.
    constexpr float GROW = 8.0f;
    const float grow_span = GROW / sl2;
    unsigned pa[BN / 16][4];

    auto release = [&](unsigned bar) {
        if (lane == 0) {
            kiln_tma::arrive(bar);
        }
    };
    // The tile in slot i & 1 (the end when past the last tile), read again where needed and
    // released at the end of the tile, so few registers carry it through the key loop. The
    // slot is written and read with shared-memory atomics: the mbarriers order the two, and
    // atomics keep the race checker, which does not follow mbarriers, from reporting them.
    // One lane reads (32 atomics on one address would queue behind each other).
    auto tile_at = [&](unsigned i) {
        int t = 0;
        if (lane == 0) {
            asm volatile("atom.shared.add.u32 %0, [%1], 0;\n" : "=r"(t) : "r"(smem_u32(kiln_tile_slot) + 4 * (i & 1)) : "memory");
        }
        return __shfl_sync(0xffffffffu, t, 0);
    };
    auto read_tile = [&](unsigned i) {
        kiln_tma::wait(tile_full(i & 1), (i >> 1) & 1);
        return tile_at(i);
    };
    // The consumers issue their products in strict turns, round the ring: consumer c takes its
    // turn on named barrier 4 + c and passes it on the next one's (a named barrier counts
    // threads, so no consumer may pass twice before the next took the turn). In a tile with K
    // key tiles every consumer takes K + 1 turns: one per key tile it uses, one for its last
    // P V, and an empty one per key tile it does not use. The last consumer uses every key
    // tile, so its last turn is its last P V, unless its rows lie past the queries: then its
    // K empty turns come first and the one a P V would take last (the only one when K = 0).
    // It passes its last turn on to the next tile, which it learns just before, or not at all
    // after the last tile.
    int next = items;
    auto learn_next = [&](unsigned i) {
        if (cw == NC - 1) {
            next = read_tile(i + 1);
        }
    };
    auto take_turn = [&]() { asm volatile("bar.sync %0, 256;\n" ::"r"(4 + cw) : "memory"); };
    auto pass_turn = [&](bool last) {
        if (cw != NC - 1 || !last || next < items) {
            asm volatile("bar.arrive %0, 256;\n" ::"r"(cw == NC - 1 ? 4 : 5 + cw) : "memory");
        }
    };
    unsigned loads = 0;
    int u = read_tile(0);
    if (cw == NC - 1 && u < items) {
        asm volatile("bar.arrive %0, 256;\n" ::"r"(4) : "memory");
    }
    for (unsigned i = 0; u < items; ++i) {
        const int q0 = first_query(tile_of(u));
        const int w0 = q0 + cw * 64;
        const int row_lo = w0 + rl;
        // The item's key tiles [j0, j0 + ntiles) (the producer loads them all) and the first nw
        // of them, those this consumer uses.
        const int kt = tile_tiles(q0);
        const int j0 = keys_from(u, kt);
        const int ntiles = keys_to(u, kt) - j0;
        const int nw = max(0, min(ntiles, tiles_of(q0, cw) - j0));
#pragma unroll
        for (int k = 0; k < OACC; ++k) {
            o[k] = 0.0f;
        }
        m[0] = m[1] = HIDE;
        mb[0] = mb[1] = 0.0f;
        grow_at[0] = grow_at[1] = HIDE + grow_span;
        l[0] = l[1] = 0.0f;
        settled = false;
        // Key tile j0 + j of this item: its stage, and the parity of that stage's barriers.
        auto k_stage = [&](int j) { return (loads + j) & 1; };
        auto phase = [&](int j) { return ((loads + j) >> 1) & 1; };
        auto issue_s = [&](int j) {
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                const unsigned long long da = kiln_wg::desc_add(dq, (kk >> 2) * (64 * 128) + (kk & 3) * 32);
                const unsigned long long db = kiln_wg::desc_add(dk, k_stage(j) * TBYTES + (kk >> 2) * (BN * 128) + (kk & 3) * 32);
                kiln_wg::mma_ss<BF16>(s, da, db, kk > 0);
            }
            kiln_wg::commit();
        };
        auto issue_pv = [&](int j) {
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const unsigned long long db = kiln_wg::desc_add(dv, k_stage(j) * TBYTES + kk * 2048);
                if constexpr (HD == 64) {
                    kiln_wg::mma_rs_vt64<BF16>(o, pa[kk], db, 1);
                } else {
                    kiln_wg::mma_rs_vt<BF16>(o, pa[kk], db, 1);
                }
            }
            kiln_wg::commit();
        };
        // O scaled by the last tile's correction, before P V of that tile is added; skipped
        // when the last softmax kept the row extremes.
        auto rescale = [&]() {
            if (!rescaling) {
                return;
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
#pragma unroll
                for (int jj = 0; jj < OACC / 4; ++jj) {
                    o[4 * jj + 2 * r] *= corr[r];
                    o[4 * jj + 2 * r + 1] *= corr[r];
                }
            }
        };
        // S_j once more on the CUDA cores, from the inputs in device memory (f32 products and
        // sums; rows past the queries give 0, as their TMA rows do), for a key tile without
        // hidden keys whose exponents overflowed against the kept extremes. s is indexed
        // statically only, so it stays in registers.
        auto scores_again = [&](int j) {
            // The thread's first row of q and first key of k (B·H·T rows of D values fit an int),
            // kept in its slot of the consumer's output staging rows (unused until the tile's
            // end) and read back for each score, so no register holds them through the loop.
            {
                const int hb = head_of(tile_of(tile_at(i)));
                const int q_row = hb * Tq + row_lo;
                const int k_row = kv_head_of(hb) * Tk + (j0 + j) * BN + 2 * (lane & 3);
                asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(sow + 8 * wt), "r"(q_row), "r"(k_row) : "memory");
            }
#pragma unroll 1
            for (int e = 0; e < BN / 2; ++e) {
                float acc = 0.0f;
                if (row_lo + 8 * ((e >> 1) & 1) < Tq) {
                    int q_row;
                    int k_row;
                    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(q_row), "=r"(k_row) : "r"(sow + 8 * wt) : "memory");
                    const auto* qr = q + static_cast<long>(q_row + 8 * ((e >> 1) & 1)) * HD;
                    const auto* kr = k + static_cast<long>(k_row + 8 * (e >> 2) + (e & 1)) * HD;
#pragma unroll 1
                    for (int x = 0; x < HD; ++x) {
                        acc = fmaf(static_cast<float>(qr[x]), static_cast<float>(kr[x]), acc);
                    }
                }
#pragma unroll
                for (int t = 0; t < BN / 2; ++t) {
                    s[t] = t == e ? acc : s[t];
                }
            }
        };
        // The online softmax of S_j: new row extremes, the correction of the old sums, P_j in s.
        // The extremes move only when some row of the warp would otherwise see a p above
        // 2^GROW (a warp-uniform choice): below that the old extreme serves as well, the p,
        // sums and O all relative to it, and the O and sum corrections are skipped.
        // A key tile without hidden keys in a settled warp first takes its exponents against the
        // kept extremes: every p is at most its thread's row sum, so sums within 2^GROW keep the
        // extremes without their reduction. Otherwise the rows whose sums passed 2^GROW are
        // scaled by a power of two (exact) into [1, 2), the extremes moved by as much, or, where
        // an exponent overflowed, S_j is formed again and the extremes reduced as below.
        auto softmax = [&](int j) {
            const int n0 = (j0 + j) * BN;
            const bool edge = n0 + BN > Tk || (CAUSAL && n0 + BN - 1 > w0 + shift);
            if (!edge && settled) {
                constexpr float KEPT = 256.0f; // 2^GROW
                float sum[2] = {0.0f, 0.0f};
#pragma unroll
                for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            const float p = ex2(fmaf(s[4 * jj + 2 * r + c], sl2, mb[r]));
                            s[4 * jj + 2 * r + c] = p;
                            sum[r] += p;
                        }
                    }
                }
                rescaling = !__all_sync(0xffffffffu, sum[0] <= KEPT && sum[1] <= KEPT);
                if (!rescaling) {
                    l[0] += sum[0];
                    l[1] += sum[1];
                    return;
                }
                float total[2] = {sum[0], sum[1]};
#pragma unroll
                for (int lanes = 1; lanes <= 2; lanes *= 2) {
                    total[0] += __shfl_xor_sync(0xffffffffu, total[0], lanes);
                    total[1] += __shfl_xor_sync(0xffffffffu, total[1], lanes);
                }
                if (!__any_sync(0xffffffffu, isinf(total[0]) || isinf(total[1]))) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        // 2^-e with total·2^-e in [1, 2) where the row's total passed 2^GROW
                        // (a NaN row, from NaN scores, stays as it is).
                        const int e = total[r] > KEPT ? min(static_cast<int>(__float_as_uint(total[r]) >> 23) - 127, 126) : 0;
                        corr[r] = __uint_as_float(static_cast<unsigned>(127 - e) << 23);
                        l[r] = (l[r] + sum[r]) * corr[r];
#pragma unroll
                        for (int jj = 0; jj < BN / 8; ++jj) {
                            s[4 * jj + 2 * r] *= corr[r];
                            s[4 * jj + 2 * r + 1] *= corr[r];
                        }
                        if (e > 0) {
                            mb[r] -= static_cast<float>(e);
                            m[r] = -mb[r] / sl2;
                            grow_at[r] = m[r] + grow_span;
                        }
                    }
                    return;
                }
                scores_again(j);
            }
            // Each row's extreme over the key tile, held in corr[r] until the choice is made, and
            // whether the row's largest exponent grows by more than GROW: that extreme past
            // grow_at (always when a row sees its first key, never while it sees none or under a
            // zero scale).
            // The two rows reduced together, key pair by key pair: two chains of dependent steps
            // side by side instead of one after the other (the chains' latency, not their
            // instruction count, is what the other consumer's turn waits for).
            if (edge) {
                corr[0] = corr[1] = HIDE;
#pragma unroll
                for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int row = row_lo + 8 * r;
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            const int key = n0 + 8 * jj + 2 * (lane & 3) + c;
                            const bool ok = key < Tk && (!CAUSAL || key <= row + shift);
                            const float x = ok ? s[4 * jj + 2 * r + c] : HIDE;
                            s[4 * jj + 2 * r + c] = x;
                            corr[r] = extreme(corr[r], x);
                        }
                    }
                }
            } else {
                corr[0] = extreme(s[0], s[1]);
                corr[1] = extreme(s[2], s[3]);
#pragma unroll
                for (int jj = 1; jj < BN / 8; ++jj) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        corr[r] = extreme(corr[r], extreme(s[4 * jj + 2 * r], s[4 * jj + 2 * r + 1]));
                    }
                }
            }
            // Both rows' quad reductions go together, so one row's shuffles wait while the
            // other's are in flight.
#pragma unroll
            for (int lanes = 1; lanes <= 2; lanes *= 2) {
                const float x0 = __shfl_xor_sync(0xffffffffu, corr[0], lanes);
                const float x1 = __shfl_xor_sync(0xffffffffu, corr[1], lanes);
                corr[0] = extreme(corr[0], x0);
                corr[1] = extreme(corr[1], x1);
            }
            // grow_at lies at or past m, so the tile's extreme passes it exactly when the new
            // extreme extreme(m, tile's) does.
            bool grows = false;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                grows = grows || (NEG ? corr[r] < grow_at[r] : corr[r] > grow_at[r]);
            }
            rescaling = __any_sync(0xffffffffu, grows);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (rescaling) {
                    const float m_new = extreme(m[r], corr[r]);
                    // A row with no visible key so far keeps m = HIDE and p = 0.
                    const float mb_new = -(m_new == HIDE ? 0.0f : m_new) * sl2;
                    corr[r] = m[r] == HIDE ? 0.0f : ex2(mb_new - mb[r]);
                    m[r] = m_new;
                    mb[r] = mb_new;
                    grow_at[r] = m_new + grow_span;
                    l[r] *= corr[r];
                }
                float sum = 0.0f;
#pragma unroll
                for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const float x = s[4 * jj + 2 * r + c];
                        float p = ex2(fmaf(x, sl2, mb[r]));
                        // A hidden score's exponent is -inf, so p = 0, except under a zero (or
                        // subnormal) scale, the variant that makes it 0 here.
                        if constexpr (ZERO_SCALE) {
                            if (edge) {
                                p = x == HIDE ? 0.0f : p;
                            }
                        }
                        s[4 * jj + 2 * r + c] = p;
                        sum += p;
                    }
                }
                l[r] += sum;
            }
            if (rescaling) {
                settled = __all_sync(0xffffffffu, isfinite(m[0]) && isfinite(m[1]));
            }
        };
        // P_j as register A fragments (kk covers keys 16kk..16kk+15), once the product that
        // reads the previous ones is complete.
        auto pack = [&]() {
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                pa[kk][0] = pack2<BF16>(s[8 * kk + 0], s[8 * kk + 1]);
                pa[kk][1] = pack2<BF16>(s[8 * kk + 2], s[8 * kk + 3]);
                pa[kk][2] = pack2<BF16>(s[8 * kk + 4], s[8 * kk + 5]);
                pa[kk][3] = pack2<BF16>(s[8 * kk + 6], s[8 * kk + 7]);
            }
        };

        kiln_tma::wait(q_full, i & 1);
        if (nw == 0) {
            release(q_empty);
        } else {
            // Key tile 0: S_0 alone.
            kiln_tma::wait(k_full(k_stage(0)), phase(0));
            take_turn();
            kiln_wg::keep<BN / 2>(s);
            kiln_wg::fence();
            issue_s(0);
            kiln_wg::keep<BN / 2>(s);
            pass_turn(false);
            kiln_wg::wait<0>();
            kiln_wg::keep<BN / 2>(s);
            release(k_empty(k_stage(0)));
            if (nw == 1) {
                release(q_empty);
            }
            softmax(0);
            pack();
            // Key tile j: S_j and P_{j-1} V_{j-1} in flight together, the softmax of S_j running
            // while the second product is.
            for (int j = 1; j < nw; ++j) {
                kiln_tma::wait(k_full(k_stage(j)), phase(j));
                kiln_tma::wait(v_full(k_stage(j - 1)), phase(j - 1));
                take_turn();
                kiln_wg::keep<BN / 2>(s);
                kiln_wg::fence();
                issue_s(j);
                kiln_wg::keep<OACC>(o);
                rescale();
                kiln_wg::keep<OACC>(o);
                kiln_wg::fence();
                issue_pv(j - 1);
                kiln_wg::keep<BN / 2>(s);
                kiln_wg::keep<OACC>(o);
                pass_turn(false);
                kiln_wg::wait<1>();
                kiln_wg::keep<BN / 2>(s);
                release(k_empty(k_stage(j)));
                if (j == nw - 1) {
                    release(q_empty);
                }
                softmax(j);
                kiln_wg::wait<0>();
                kiln_wg::keep<OACC>(o);
                release(v_empty(k_stage(j - 1)));
                pack();
            }
            // The last key tile's P V.
            kiln_tma::wait(v_full(k_stage(nw - 1)), phase(nw - 1));
            learn_next(i);
            take_turn();
            kiln_wg::keep<OACC>(o);
            rescale();
            kiln_wg::keep<OACC>(o);
            kiln_wg::fence();
            issue_pv(nw - 1);
            kiln_wg::keep<OACC>(o);
            pass_turn(true);
            kiln_wg::wait<0>();
            kiln_wg::keep<OACC>(o);
            release(v_empty(k_stage(nw - 1)));
        }
        // Key tiles this consumer does not use are released as they arrive (so every stage's
        // barriers see every consumer once per load), each followed by an empty turn: a
        // consumer never waits for a load while it holds back a turn the others need.
        for (int j = nw; j < ntiles; ++j) {
            kiln_tma::wait(k_full(k_stage(j)), phase(j));
            release(k_empty(k_stage(j)));
            kiln_tma::wait(v_full(k_stage(j)), phase(j));
            release(v_empty(k_stage(j)));
            take_turn();
            pass_turn(false);
        }
        if (nw == 0) {
            // The turn a last P V would take, after the empty ones.
            learn_next(i);
            take_turn();
            pass_turn(true);
        }

        // A part of a split tile: the consumer's O, l and row extremes go to its record in
        // `partials` (each thread's accumulators as they lie, pair k of thread wt at float2
        // k·128 + wt, then (m0, m1, l0, l1) per thread); the consumer whose part finishes last
        // (a counter per split tile and consumer, after a fence) adds the other parts' records
        // to its own, each weighted by 2^((m_p − m)·c) against the extreme m of all the parts
        // and stores the rows as for a whole tile.
        bool store = true;
        const int item = tile_at(i);
        if (item >= whole) {
            const int st = (item - whole) / parts;
            const int part = (item - whole) % parts;
            constexpr int REC = 128 * (OACC + 4);
            auto record = [&](int p) { return partials + (static_cast<long>(st * parts + p) * NC + cw) * REC; };
            float* mine = record(part);
#pragma unroll
            for (int k = 0; k < OACC / 2; ++k) {
                reinterpret_cast<float2*>(mine)[k * 128 + wt] = make_float2(o[2 * k], o[2 * k + 1]);
            }
            reinterpret_cast<float4*>(mine + OACC * 128)[wt] = make_float4(m[0], m[1], l[0], l[1]);
            __threadfence();
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
            if (wt == 0) {
                kiln_parts_done[cw] = atomicAdd(const_cast<unsigned*>(schedule) + 4 + st * NC + cw, 1u);
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
            store = kiln_parts_done[cw] == static_cast<unsigned>(parts - 1);
            if (store) {
                __threadfence();
                float mt[2] = {m[0], m[1]};
                for (int p = 0; p < parts; ++p) {
                    if (p != part) {
                        const float4 ml = __ldcg(reinterpret_cast<const float4*>(record(p) + OACC * 128) + wt);
                        mt[0] = extreme(mt[0], ml.x);
                        mt[1] = extreme(mt[1], ml.y);
                    }
                }
                // A part's rows that saw no key hold m = HIDE (weight 0 against a finite extreme);
                // the zero-scale variant keeps m = HIDE throughout (every weight 1).
                auto weight = [&](float mp, int r) { return mp == mt[r] ? 1.0f : ex2((mp - mt[r]) * sl2); };
                const float own[2] = {weight(m[0], 0), weight(m[1], 1)};
                // Pair k of a thread's accumulators lies in row k & 1 of its two.
#pragma unroll
                for (int k = 0; k < OACC; ++k) {
                    o[k] *= own[(k >> 1) & 1];
                }
                l[0] *= own[0];
                l[1] *= own[1];
                for (int p = 0; p < parts; ++p) {
                    if (p == part) {
                        continue;
                    }
                    const float* rec = record(p);
                    const float4 ml = __ldcg(reinterpret_cast<const float4*>(rec + OACC * 128) + wt);
                    const float w[2] = {weight(ml.x, 0), weight(ml.y, 1)};
#pragma unroll
                    for (int k = 0; k < OACC / 2; ++k) {
                        const float2 x = __ldcg(reinterpret_cast<const float2*>(rec) + k * 128 + wt);
                        o[2 * k] += w[k & 1] * x.x;
                        o[2 * k + 1] += w[k & 1] * x.y;
                    }
                    l[0] += w[0] * ml.z;
                    l[1] += w[1] * ml.w;
                }
            }
        }

        // The output rows, staged in this consumer's output buffer (free once its threads are
        // past the previous tile's stores), then stored in 16-byte chunks.
        if (store) {
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
            unsigned short* ob = reinterpret_cast<unsigned short*>(out) + static_cast<long>(head_of(tile_of(item))) * Tq * HD;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                // The row sum: the quad's partial sums added up.
                float lt = l[r];
                lt += __shfl_xor_sync(0xffffffffu, lt, 1);
                lt += __shfl_xor_sync(0xffffffffu, lt, 2);
                const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
                const int row = rl + 8 * r;
#pragma unroll
                for (int jj = 0; jj < HD / 8; ++jj) {
                    const unsigned a = sow + (jj >> 3) * (64 * 128) + row * 128 + (((jj & 7) ^ (row & 7)) << 4) + (lane & 3) * 4;
                    kiln_wg::sts32(a, pack2<BF16>(o[4 * jj + 2 * r] * inv, o[4 * jj + 2 * r + 1] * inv));
                }
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
            // The staging rows' base, opaque to the compiler, so it computes the read addresses here
            // instead of keeping them in registers through the key loop.
            unsigned sol;
            asm volatile("mov.b32 %0, %1;\n" : "=r"(sol) : "r"(sow));
#pragma unroll
            for (int it = 0; it < HD / 16; ++it) {
                const int k = wt + it * 128;
                const int row = k / (HD / 8);
                const int ch = k % (HD / 8);
                const int gr = w0 + row;
                const uint4 val = kiln_wg::lds128(sol + (ch >> 3) * (64 * 128) + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
                if (gr < Tq) {
                    *reinterpret_cast<uint4*>(ob + static_cast<long>(gr) * HD + ch * 8) = val;
                }
            }
        }
        release(tile_empty(i & 1));
        loads += ntiles;
        u = cw == NC - 1 ? next : read_tile(i + 1);
    }
