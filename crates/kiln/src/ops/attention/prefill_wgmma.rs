//! Warpgroup tensor-core prefill for compute capability 9.0 (FlashAttention-3 structure),
//! written in CUDA through `CudaKernel` for the architecture-specific `sm_90a` target; the
//! parent's rule sends bf16/f16 inputs with D = 64 or 128 (template `HD`), no mask or the
//! causal mask, here on a device of compute capability 9.0 exactly. Other devices keep the
//! `mma.sync` prefill.
//!
//! Work is cut into tiles of 64·NC queries of one (batch, query head), NC consumers (3 for
//! D = 64, 2 for D = 128); a consumer whose 64 rows lie past the queries (the last tile of a
//! head whose length is not a multiple of 64·NC) uses no key tiles. The launch is persistent:
//! one block per multiprocessor (fewer when there are fewer items), block b starting with item
//! b and taking each next one from a counter in device memory (zero at the launch, after the
//! tensor maps in `maps`), so blocks balance under the causal mask as under the hardware's
//! block scheduler while the producer already loads the next item's queries and keys as the
//! consumers finish the current one. An item is a whole tile or, without a mask, a part of one
//! of the tiles of the last, partial round ([`Schedule`]): a range of its key tiles, whose
//! unnormalised O, row sums and row extremes each consumer writes to the second output; the
//! consumer whose part finishes last (a counter per split tile and consumer) weighs the parts
//! against their common extreme, adds them and stores the rows. Tiles are ordered by (batch,
//! head), the last query tile of a head first: the running tiles share a few heads' K and V in
//! the L2; under the causal mask the tiles of the last heads (about four rounds of tiles) go
//! longest first across those heads, so the blocks end together. A block of 128·(NC + 1)
//! threads:
//!   warpgroup 0, the producer (`setmaxnreg` down to 32 registers): one thread publishes each
//!       tile's index in a shared slot (two slots, "tile" full/empty mbarriers), loads the
//!       tile's Q rows, then for each key tile j K_j and V_j (`BN` = 128 keys) into two
//!       stages with the tensor memory accelerator (TMA, `cp.async.bulk.tensor`), each as
//!       64-column boxes with the 128-byte swizzle. Arrival: a "full" mbarrier with the
//!       transaction byte count; reuse: an "empty" mbarrier that every consumer warp releases
//!       once per load (a consumer releases the key tiles it does not use as they arrive). Q
//!       is reloaded once every consumer's last S of the previous tile completed.
//!   warpgroups 1..NC, the consumers (232 or 160 registers, what the producer returned), 64
//!   queries each, per key tile j:
//!   S = Q K_jᵀ          `wgmma.mma_async m64nBNk16` (bf16|f16 → f32), Q and K read from
//!                       shared memory through matrix descriptors, D/16 steps, one group;
//!   O = O·corr_{j-1}    while S_j runs, then O += P_{j-1} V_{j-1} issued (`m64nDk16`, P
//!                       from registers, V through a transposed (MN-major) descriptor);
//!   masked entries (keys ≥ Tk; causal: key > query + Tk − Tq) hidden, only on tiles that
//!                       cross the diagonal or the end of the keys;
//!   m' = max(m, rowmax S) over the raw scores (min under a negative scale: NEG);
//!   p = 2^(S·c − m'·c), c = scale·log2(e), one FFMA and one ex2 per score (0 where hidden);
//!   l = l·corr + Σp, corr = 2^((m − m')·c), computed while P_{j-1} V_{j-1} is in flight;
//!   the extremes move only when the exponent of some row of the warp would grow by more
//!                       than 8 (p ≤ 256, exact in the same way: O, l and p all relative to
//!                       the kept extreme); otherwise corr = 1 and the O and l corrections
//!                       are skipped (the choice is warp-uniform, so no path diverges);
//!   a key tile with no hidden key, once every row of the warp holds a finite extreme,
//!                       skips the extremes' reduction: p is formed against the kept
//!                       extremes first and, since each p is at most its thread's row sum,
//!                       sums ≤ 256 keep them; a row whose sum passed 256 is scaled by the
//!                       power of two that brings it into [1, 2) (exact; its extreme, O and l
//!                       moved by as much), and a tile whose exponents overflowed the f32
//!                       range (a jump of ~128 in base 2) forms S again on the CUDA cores from
//!                       the inputs and takes the path above;
//!   P_j rounded to the input dtype into register A fragments once that product completed
//!                       (the f32 accumulator layout of S is the A-operand layout of P).
//!   The consumers issue their products in strict turns round a ring of named barriers, so
//!   one's softmax runs while another's products do. Every `wgmma` sits on a path that
//!   depends only on warp-uniform values and no accumulator or A fragment is touched while
//!   its product is in flight, so the compiler keeps the products asynchronous (it
//!   serialises them otherwise). At the end of a tile O / l (0 where l = 0: a query that sees
//!   no key) is rounded to the input dtype, staged in the consumer's output rows (apart from
//!   Q, which the next tile's load overwrites) and stored in 16-byte chunks.
//!
//! Shared memory (the TMA 128-byte swizzle, which the descriptors read): a tile of R rows of
//! D values is D/64 column blocks of 64 values; block `b` of row `r` is 128 bytes at
//! `b·R·128 + r·128`, its 16-byte chunk `c` stored at chunk `c ^ (r & 7)`; tiles start on
//! 1024-byte boundaries. K-major descriptors (Q, K): stride between 8-row groups 1024 bytes,
//! step `k` of 16 values at block `k / 4`, byte `32 (k % 4)`. MN-major descriptor (V): 8-key
//! groups 1024 bytes apart, column blocks `R·128` bytes apart, step `k` at key `16 k`.
//! Tensor maps (`Backend::tensor_map_16bit`, encoded per call for the arrays passed and
//! read by the kernel from device memory): Q as (D, Tq, B·Hq) in boxes of (64, 64, 1), K and
//! V as (D, Tk, B·Hkv) in boxes of (64, BN, 1); rows past Tq or Tk arrive as zeros.
//!
//! The persistent launch, the split last round, three consumers at D = 64, the corrections
//! skipped while the extremes stay, the two softmax shortenings and the exponents formed against
//! the kept extremes first each measured faster on the H100; the measurements, and the forms
//! measured and not used (among them the row sums on the tensor cores), are in
//! `bench/results/notes/ops.md`.
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D), row-contiguous (copied otherwise)
//! with 16-byte aligned starts; output (B, Hq, Tq, D). Reference: the parent's `reference`
//! (f64). Tolerance: the dtype table (P is rounded to the input dtype, as in FlashAttention).

use std::fmt::Write;
use std::sync::OnceLock;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, KernelInput, LaunchSpec};
use crate::ops::kernel_cache::KernelCache;

/// Head dimensions the kernel takes.
pub const HEAD_DIMS: [usize; 2] = [64, 128];
/// The compute capability whose architecture-specific target (`sm_90a`) the kernel needs.
pub const CAPABILITY: (u32, u32) = (9, 0);
/// Consumer warpgroups of a block (64 queries each) for head dimension `d`: three for D = 64,
/// whose products are short beside the softmax, so a third consumer keeps the tensor cores
/// busier (FlashAttention-3's 192-query tiles); two for D = 128, whose accumulators do not fit
/// the 160 registers a thread three consumers could have.
fn consumers(d: usize) -> usize {
    if d == 64 {
        3
    } else {
        2
    }
}

/// Threads per block: the producer warpgroup and the consumers.
fn threads(d: usize) -> usize {
    128 * (consumers(d) + 1)
}

/// Registers a thread of the producer and of a consumer warpgroup keep after `setmaxnreg`.
/// A block starts with the registers the compiler gave every thread (65536 / threads, rounded
/// down to a multiple of 8, under `__launch_bounds__`); a consumer's `setmaxnreg.inc` waits
/// until the producer's `setmaxnreg.dec` returned enough to the block's pool, so the consumers'
/// increase must not exceed what the producer gives back, or the block never starts its
/// products. The compiler allocates each side's code within its own count (32 producer
/// registers: no spills; 24 spill its tile loop).
fn registers(d: usize) -> (usize, usize) {
    if consumers(d) == 3 {
        (32, 160)
    } else {
        (32, 232)
    }
}

/// Registers per thread at the launch for head dimension `d`: what `__launch_bounds__(threads,
/// 1)` leaves (the compile test checks that ptxas reports this count).
pub fn launch_registers(d: usize) -> usize {
    (65536 / threads(d)) / 8 * 8
}

/// Queries per block.
fn block_queries(d: usize) -> usize {
    64 * consumers(d)
}

/// Keys per tile. 176 without a mask (FlashAttention-3's choice), three stages, and waiting for
/// V_(j-1) after S_j is issued measured no faster on the H100 (`bench/results/notes/ops.md`).
const KEYS: usize = 128;

/// Shared memory bytes: the query tile, two stages of key and value tiles, the output staging
/// tile, and 1024 bytes to align the start.
fn shared_bytes(d: usize) -> usize {
    (2 * block_queries(d) + 4 * KEYS) * d * 2 + 1024
}

/// Fewest key tiles a part of a split tile takes (each part pays a tile's start, its record and
/// a share of the combination), and most parts a tile is split into.
const MIN_PART_KEY_TILES: usize = 4;
const MAX_PARTS: usize = 8;

/// Rounds of tiles (tiles per multiprocessor) at the end of a causal launch taken longest first.
const LONGEST_FIRST_ROUNDS: usize = 4;

/// How a launch's tiles become the items its blocks take: the last `split` tiles each cut into
/// `parts` items over their key tiles, the others whole, over `blocks` blocks; the tiles of the
/// last `last_heads` (batch, head) pairs ordered longest first across those heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub tiles: usize,
    pub split: usize,
    pub parts: usize,
    pub last_heads: usize,
    pub blocks: usize,
}

impl Schedule {
    /// The schedule of `heads` (batch, head) pairs of `query_tiles` tiles each over `key_tiles`
    /// key tiles. Without a mask every tile takes as long, so whole tiles over
    /// `multiprocessors` blocks end in a round of `tiles % multiprocessors` tiles while the other
    /// blocks wait: those tiles are split, each into as many parts as keep every part to its own
    /// block and at least [`MIN_PART_KEY_TILES`] of the key tiles (at most [`MAX_PARTS`]); that
    /// round then takes about 1 / parts of a tile. Under the causal mask a tile's length grows
    /// with its queries and the blocks take the next tile as they finish; a head's tiles go
    /// longest first, heads one after the other (the running tiles share their keys in the
    /// L2), except for the tiles of about [`LONGEST_FIRST_ROUNDS`] rounds at the end, the last
    /// heads', which go longest first across those heads, so the last tiles taken are the
    /// shortest and the blocks end together.
    pub fn new(heads: usize, query_tiles: usize, key_tiles: usize, multiprocessors: usize, causal: bool) -> Schedule {
        let multiprocessors = multiprocessors.max(1);
        let tiles = heads * query_tiles;
        let rest = tiles % multiprocessors;
        let parts = if causal || rest == 0 {
            1
        } else {
            (multiprocessors / rest).min(key_tiles / MIN_PART_KEY_TILES).min(MAX_PARTS)
        };
        let split = if parts >= 2 { rest } else { 0 };
        let parts = parts.max(1);
        let last_heads =
            if causal { heads.min((LONGEST_FIRST_ROUNDS * multiprocessors).div_ceil(query_tiles.max(1))) } else { 0 };
        let items = tiles - split + split * parts;
        Schedule { tiles, split, parts, last_heads, blocks: items.min(multiprocessors).max(1) }
    }

    /// Bytes after the three tensor maps in the `maps` input: the item counter (zero at the
    /// launch, from which the blocks take their next item), the split tiles, the parts of each
    /// and the heads ordered longest first (u32 each), and one counter of finished parts per
    /// split tile and consumer (zero at the launch).
    fn bytes(&self, d: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; 16 + 4 * self.split * consumers(d)];
        bytes[4..8].copy_from_slice(&(self.split as u32).to_le_bytes());
        bytes[8..12].copy_from_slice(&(self.parts as u32).to_le_bytes());
        bytes[12..16].copy_from_slice(&(self.last_heads as u32).to_le_bytes());
        bytes
    }

    /// Floats of the split tiles' partial results: per part and consumer, each thread's
    /// accumulators and its two rows' extremes and sums (at least one float).
    fn partial_floats(&self, d: usize) -> usize {
        let accumulators = d / 2;
        (self.split * self.parts * consumers(d) * 128 * (accumulators + 4)).max(1)
    }
}

/// One `wgmma.mma_async` m64nNk16 wrapper (N / 2 f32 accumulators a thread): A from shared
/// memory (`ss`) or registers (`rs`).
fn wgmma_fn(out: &mut String, name: &str, n: usize, a_in_registers: bool, trans_b: bool) {
    let _ = writeln!(
        out,
        "template <int BF> __device__ __forceinline__ void {name}(float* d, {}, unsigned long long db, int acc) {{",
        if a_in_registers { "const unsigned* a" } else { "unsigned long long da" }
    );
    let acc = n / 2;
    let regs: Vec<String> = (0..acc).map(|i| format!("%{i}")).collect();
    let (a_ops, next) = if a_in_registers {
        (format!("{{%{}, %{}, %{}, %{}}}", acc, acc + 1, acc + 2, acc + 3), acc + 4)
    } else {
        (format!("%{acc}"), acc + 1)
    };
    let imm = if a_in_registers { format!("{}", trans_b as u8) } else { format!("0, {}", trans_b as u8) };
    let outs: Vec<String> = (0..acc).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let a_in = if a_in_registers { "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])" } else { "\"l\"(da)" };
    for (ty, cond) in [("bf16", "if constexpr (BF)"), ("f16", "else")] {
        let _ = writeln!(
            out,
            "  {cond} {{\n    asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n\"\n      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, {a_ops}, %{next}, p, 1, 1, {imm};\\n}}\\n\"\n      : {}\n      : {a_in}, \"l\"(db), \"r\"(acc));\n  }}",
            next + 1,
            regs.join(", "),
            outs.join(", "),
        );
    }
    out.push_str("}\n");
}

/// The kernel's helpers: the `mma.sync` prefill's (packing, `ex2`), the warpgroup ones and
/// the TMA ones.
fn header() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = String::from(super::prefill_cuda::HEADER);
        s.push_str(WG_HEADER);
        s.push_str(TMA_HEADER);
        s.push_str("namespace kiln_wg {\n");
        wgmma_fn(&mut s, "mma_ss", KEYS, false, false);
        wgmma_fn(&mut s, "mma_rs_vt", 128, true, true);
        wgmma_fn(&mut s, "mma_rs_vt64", 64, true, true);
        s.push_str("}  // namespace kiln_wg\n");
        s
    })
}

const WG_HEADER: &str = r#"
namespace kiln_wg {
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ordinary (and cp.async) writes to shared memory made visible to the tensor cores' reads.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accesses of N accumulators across a wgmma fence or wait.
template <int N> __device__ __forceinline__ void keep(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        asm volatile("" : "+f"(d[i])::"memory");
    }
}
// A 128-byte-swizzle matrix descriptor.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(lbo >> 4) << 16) |
           (static_cast<unsigned long long>(sbo >> 4) << 32) | (1ull << 62);
}
// Descriptor `d` moved on by `bytes` (a multiple of 16): only the start address field (bits
// 0-13, the address / 16) changes, and shared addresses stay under 256 KB, so one 32-bit add
// never carries into the fields above it.
__device__ __forceinline__ unsigned long long desc_add(unsigned long long d, unsigned bytes) {
    return (d & 0xFFFFFFFF00000000ull) | (static_cast<unsigned>(d) + (bytes >> 4));
}
__device__ __forceinline__ void sts32(unsigned a, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 lds128(unsigned a) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
    return v;
}
}  // namespace kiln_wg
"#;

const TMA_HEADER: &str = r#"
namespace kiln_tma {
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void expect_bytes(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of `bar` with this parity has completed.
__device__ __forceinline__ void wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\nKILN_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra KILN_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// One box of a 3-D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void load_box(unsigned dst, const void* map, int c0, int c1, int c2, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
// The host wrote the maps through the generic proxy; the TMA reads them through its own.
__device__ __forceinline__ void acquire_map(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map) : "memory");
}
}  // namespace kiln_tma
"#;

/// The kernel body (CUDA).
const SOURCE: &str = include_str!("prefill_wgmma.cu");

const INPUTS: [&str; 5] = ["q", "k", "v", "scale", "maps"];

/// The kernel for head dimension `d` (one of [`HEAD_DIMS`]; its shared memory is sized for it).
pub(super) fn kernel(op: &str, d: usize) -> Result<&'static CudaKernel> {
    static CELLS: KernelCache<CudaKernel, 2> = KernelCache::new();
    let Some(slot) = HEAD_DIMS.iter().position(|&h| h == d) else {
        return Err(Error::shape(op, format!("the warpgroup prefill takes D in {HEAD_DIMS:?}, got {d}")));
    };
    CELLS.get(op, slot, || {
        Ok(CudaKernel::new("kiln_sdpa_prefill_wgmma", &INPUTS, &["out", "partials"], SOURCE)?
            .header(header())
            .shared_memory(shared_bytes(d))
            .arch_specific(CAPABILITY)
            .launch_bounds(threads(d) as u32, 1))
    })
}

/// The schedule of a launch on `device` for `heads` (batch, query head) pairs of `tq` queries
/// over `tk` keys, head dimension `d`.
pub fn schedule(
    device: crate::device::Device,
    heads: usize,
    tq: usize,
    tk: usize,
    d: usize,
    causal: bool,
) -> Result<Schedule> {
    let multiprocessors = match device {
        crate::device::Device::Cuda(_) => crate::backend::capabilities(device)?.multiprocessors,
        _ => 1,
    };
    Ok(Schedule::new(heads, tq.div_ceil(block_queries(d)), tk.div_ceil(KEYS), multiprocessors, causal))
}

/// The launch for `q` (B, Hq, Tq, D), the softmax scale and the schedule: a negative scale
/// compiles the variant whose row extreme is the minimum of the raw scores; a zero (or
/// subnormal) one the variant that zeroes hidden keys' weights explicitly (their exponent is
/// -inf · 0 = NaN there, -inf otherwise, so the others skip that select, two instructions a
/// score). The second output holds the split tiles' partial results (the op returns the first).
pub(super) fn spec(op: &str, q: &Array, causal: bool, scale: f32, schedule: &Schedule) -> Result<LaunchSpec> {
    let dim = |n: usize| u32::try_from(n).map_err(|_| Error::invalid(op, format!("grid extent {n} exceeds u32")));
    let d = q.shape()[3];
    let threads = threads(d);
    Ok(LaunchSpec::new([dim(schedule.blocks * threads)?, 1, 1], [threads as u32, 1, 1])
        .output(q.shape(), q.dtype())
        .output(&[schedule.partial_floats(d)], DType::F32)
        .template("BF16", (q.dtype() == DType::BF16) as i32)
        .template("CAUSAL", causal as i32)
        .template("NEG", (scale < 0.0) as i32)
        .template("ZERO_SCALE", (scale.abs() < f32::MIN_POSITIVE) as i32)
        .template("BN", KEYS as i32)
        .template("HD", d as i32)
        .template("NC", consumers(d) as i32)
        .template("PRODUCER_REGS", registers(d).0 as i32)
        .template("CONSUMER_REGS", registers(d).1 as i32)
        .device(q.device()))
}

/// The inputs of the kernel for CUDA arrays `q`, `k`, `v`, `scale` and the schedule: the
/// three made row-contiguous (copied when they are not), their tensor maps, encoded for those
/// copies, and the schedule's counters.
pub(super) fn inputs(
    op: &str,
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    schedule: &Schedule,
) -> Result<Vec<KernelInput>> {
    if !matches!(q.device(), crate::device::Device::Cuda(_)) {
        return Err(Error::invalid(op, format!("the warpgroup prefill runs on CUDA devices, not {}", q.device())));
    }
    let backend = crate::backend::backend_for(q.device())?;
    let [q, k, v] = [q, k, v].map(|a| if a.is_row_contiguous() { Ok(a.clone()) } else { backend.row_contiguous(a) });
    let (q, k, v) = (q?, k?, v?);
    let (qs, ks) = (q.shape(), k.shape());
    let d = qs[3];
    let counters = schedule.bytes(d);
    let mut maps = Vec::with_capacity(3 * crate::backend::TENSOR_MAP_BYTES + counters.len());
    maps.extend(backend.tensor_map_16bit(op, &q, [d as u64, qs[2] as u64, (qs[0] * qs[1]) as u64], [64, 64, 1])?);
    for a in [&k, &v] {
        maps.extend(backend.tensor_map_16bit(
            op,
            a,
            [d as u64, ks[2] as u64, (ks[0] * ks[1]) as u64],
            [64, KEYS as u32, 1],
        )?);
    }
    maps.extend(counters);
    let maps = Array::from_bytes(DType::U8, &[maps.len()], &maps)?.to_device(q.device())?;
    Ok(vec![q.into(), k.into(), v.into(), scale.into(), maps.into()])
}

/// The entry name and CUDA source (without the prelude) of the kernel for `dtype`, `d`, the
/// mask kind and the softmax scale (its sign and whether it is zero pick the variant), for
/// compile-only checks (compile for `sm_90a`).
pub fn cuda_source(dtype: DType, d: usize, causal: bool, scale: f32) -> Result<(String, String)> {
    let op = "scaled_dot_product_attention";
    let q = Array::full(dtype, &[1, 1, 1, d], 0.0)?;
    let schedule = schedule(q.device(), 1, 1, 1, d, causal)?;
    let spec = spec(op, &q, causal, scale, &schedule)?;
    let k = kernel(op, d)?;
    let scale = Array::scalar(1.0f32);
    let maps = Array::full(DType::U8, &[3 * crate::backend::TENSOR_MAP_BYTES + schedule.bytes(d).len()], 0.0)?;
    Ok((k.kernel_name(&spec.template), k.generate(&[q.clone(), q.clone(), q, scale, maps], &spec)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_carry_one_accumulator_per_two_columns() {
        let mut text = String::new();
        wgmma_fn(&mut text, "probe", 64, true, true);
        assert!(text.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"), "{text}");
        assert!(text.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"), "{text}");
        // 32 accumulators, then the four A registers and the B descriptor, per dtype branch.
        assert_eq!(text.matches("\"+f\"(d[").count(), 2 * 32, "{text}");
        assert!(text.contains("{%32, %33, %34, %35}, %36, p, 1, 1, 1;"), "{text}");
        let mut ss = String::new();
        wgmma_fn(&mut ss, "probe_ss", 128, false, false);
        assert_eq!(ss.matches("\"+f\"(d[").count(), 2 * 64, "{ss}");
        assert!(ss.contains("%64, %65, p, 1, 1, 0, 0;"), "{ss}");
    }

    #[test]
    fn the_producer_returns_the_registers_the_consumers_take() {
        for d in HEAD_DIMS {
            let (producer, consumer) = registers(d);
            let start = launch_registers(d);
            assert!(producer % 8 == 0 && consumer % 8 == 0 && (24..=256).contains(&producer) && consumer <= 256);
            assert!(producer <= start && consumer >= start, "D = {d}");
            let returned = (start - producer) * 128;
            let taken = (consumer - start) * 128 * consumers(d);
            assert!(taken <= returned, "D = {d}: consumers take {taken} registers, the producer returns {returned}");
            assert!((producer + consumers(d) * consumer) * 128 <= 65536, "D = {d}");
        }
    }

    #[test]
    fn the_last_round_of_tiles_is_split_without_a_mask_and_ordered_under_it() {
        // 128 heads of 32 tiles on 132 multiprocessors: 31 whole rounds and 4 tiles, each split
        // 8 ways (32 key tiles, 4 a part), so the last round takes 32 blocks.
        let s = Schedule::new(128, 32, 32, 132, false);
        assert_eq!((s.split, s.parts, s.last_heads, s.blocks), (4, 8, 0, 132));
        // 44 tiles left: 3 parts each fill the 132 blocks.
        let s = Schedule::new(128, 22, 32, 132, false);
        assert_eq!(s, Schedule { tiles: 2816, split: 44, parts: 3, last_heads: 0, blocks: 132 });
        // Fewer tiles than multiprocessors: every tile is split, the blocks one per item.
        assert_eq!(
            Schedule::new(16, 1, 8, 132, false),
            Schedule { tiles: 16, split: 16, parts: 2, last_heads: 0, blocks: 32 }
        );
        // Whole rounds, short keys, a rest too large to split, no tiles: none split.
        for (heads, tiles, keys) in [(264, 1, 32), (16, 1, 7), (200, 1, 32), (0, 32, 32)] {
            let s = Schedule::new(heads, tiles, keys, 132, false);
            assert_eq!((s.split, s.parts, s.blocks), (0, 1, (heads * tiles).clamp(1, 132)), "{heads} {tiles} {keys}");
        }
        // Causal: none split; the last heads holding about four rounds of tiles go longest first
        // (528 tiles: 17 heads of 32, 24 of 22), all of them when there are fewer.
        for (heads, tiles, last) in [(128, 32, 17), (128, 22, 24), (8, 32, 8), (1000, 1, 528)] {
            let s = Schedule::new(heads, tiles, 32, 132, true);
            assert_eq!((s.split, s.parts, s.last_heads), (0, 1, last), "{heads} {tiles}");
        }
        // The counters: the split tiles, their parts and the longest-first heads after the item
        // counter, then one per split tile and consumer.
        let bytes = Schedule::new(128, 32, 32, 132, false).bytes(128);
        assert_eq!(bytes.len(), 16 + 4 * 4 * 2);
        assert_eq!((&bytes[4..8], &bytes[8..12]), (&4u32.to_le_bytes()[..], &8u32.to_le_bytes()[..]));
        assert!(bytes[..4].iter().chain(&bytes[12..]).all(|&b| b == 0));
        assert_eq!(&Schedule::new(128, 32, 32, 132, true).bytes(128)[4..16], &[0, 0, 0, 0, 1, 0, 0, 0, 17, 0, 0, 0]);
        assert_eq!(Schedule::new(128, 32, 32, 132, false).partial_floats(128), 4 * 8 * 2 * 128 * 68);
        assert_eq!(Schedule::new(264, 1, 32, 132, false).partial_floats(64), 1);
    }

    #[test]
    fn head_dimensions_outside_the_set_are_refused() {
        for d in [32, 96, 256] {
            let err = kernel("attention", d).unwrap_err();
            assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
        }
        for d in HEAD_DIMS {
            let q = Array::full(DType::BF16, &[2, 3, 300, d], 0.0).unwrap();
            let spec =
                spec("attention", &q, true, 0.125, &schedule(q.device(), 6, 300, 300, d, true).unwrap()).unwrap();
            let t = threads(d) as u32;
            // A host array: one block (the launch takes one per multiprocessor).
            assert_eq!(spec.grid, [t, 1, 1]);
            assert_eq!(spec.threadgroup, [t, 1, 1]);
            let (entry, text) = cuda_source(DType::BF16, d, true, 0.125).unwrap();
            assert!(text.contains(&format!("constexpr int HD = {d};")) && text.contains(&entry), "{entry}");
        }
    }
}
