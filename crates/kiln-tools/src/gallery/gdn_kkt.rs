//! Gated delta net `chunk_scaled_dot_kkt` as a full-file Metal kernel (`gdn_kkt.metal`): the
//! strictly lower-triangular, gated, beta-scaled key Gram matrix of each chunk of BT = 32 tokens.
//!
//! `A[b, t0+i, h, j] = (i > j) ? exp(g[t0+i] - g[t0+j]) * sum_k KT(k[t0+i, k] beta[t0+i]) k[t0+j, k] : 0`
//! for value head `h` reading key head `h / (H / Hg)` (grouped heads). The scaled keys are
//! rounded to the input dtype before the dot product (the FLA ordering); dots accumulate in f32
//! in threadgroup memory, K staged in tiles of 32 through `[[threadgroup(0)]]`.
//! Dispatch: `dispatchThreadgroups` over (chunks, H, B), 128 threads per group, two dynamic
//! threadgroup buffers, sizes in a `constant uint*` buffer. Unlike the kernel this follows, a
//! sequence length that is not a multiple of BT (a partial last chunk) and a K that is not a
//! multiple of the tile width are handled.
//! Layout: `k` (B, T, Hg, K) of f32/f16/bf16; `beta`, `g` (B, T, H) f32; output `A`
//! (B, T, H, BT) f32.
//! Reference: the library op's (`kiln::ops::gdn_kkt::reference_in_chunks` at BT = 32): f64 sums
//! of the same dtype-rounded scaled keys. Tolerance: the dtype table, since the kernel rounds the
//! scaled keys to the input dtype: one of them landing one ulp apart from the reference's alone
//! moves the result by more than 1e-5.

use std::time::Instant;

use super::entry::{check_dtype, host_input, normal_input, values, Demo, Entry, Outcome, Part, Rng, FLOAT_DTYPES};
use kiln::array::Array;
use kiln::backend::Dispatch;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LibraryArg, LibraryLaunch, MetalLibrary};

pub const ENTRY: Entry =
    Entry { name: "gdn_kkt (full file)", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::BF16], demo: Demo::Kernel(demo) };

/// The Metal file, compiled as is.
pub const SOURCE: &str = include_str!("gdn_kkt.metal");

/// Tokens per chunk and staged K-tile width, as fixed in the Metal file.
pub const BT: usize = 32;
const BK: usize = 32;
const THREADS: u32 = 128;

struct Call {
    library: MetalLibrary,
    args: Vec<LibraryArg>,
    launch: LibraryLaunch,
    device: Device,
}

fn prepare(k: &Array, beta: &Array, g: &Array, heads: usize) -> Result<Call> {
    let op = "gdn_kkt";
    check_dtype(op, k.dtype(), &FLOAT_DTYPES)?;
    check_dtype(op, beta.dtype(), &[DType::F32])?;
    check_dtype(op, g.dtype(), &[DType::F32])?;
    let &[b, t, hg, kd] = k.shape() else {
        return Err(Error::shape(op, format!("k must be 4-D (B, T, Hg, K), got {:?}", k.shape())));
    };
    if hg == 0 || heads == 0 || heads % hg != 0 || t == 0 || kd == 0 {
        return Err(Error::shape(op, format!("need T, K > 0 and H ({heads}) a multiple of Hg ({hg})")));
    }
    super::entry::check_shape(op, "beta", beta, &[b, t, heads])?;
    super::entry::check_shape(op, "g", g, &[b, t, heads])?;
    let function = match k.dtype() {
        DType::F32 => "gdn_kkt_f32",
        DType::F16 => "gdn_kkt_f16",
        _ => "gdn_kkt_bf16",
    };
    let params: Vec<u8> = [b, t, hg, heads, kd]
        .iter()
        .map(|&v| u32::try_from(v).map_err(|_| Error::invalid(op, format!("size {v} exceeds u32"))))
        .collect::<Result<Vec<u32>>>()?
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let groups = [super::entry::dim(op, t.div_ceil(BT))?, super::entry::dim(op, heads)?, super::entry::dim(op, b)?];
    let mut launch = LibraryLaunch::new(function, Dispatch::Threadgroups(groups), [THREADS, 1, 1]);
    launch.threadgroup_memory = vec![BT * BK * k.dtype().size(), BT * BT * 4];
    let args = vec![
        LibraryArg::Array(k.clone()),
        LibraryArg::Array(beta.clone()),
        LibraryArg::Array(g.clone()),
        LibraryArg::Output { shape: vec![b, t, heads, BT], dtype: DType::F32, init_value: None },
        LibraryArg::Bytes(params),
    ];
    Ok(Call { library: MetalLibrary::new("gdn_kkt", SOURCE), args, launch, device: k.device() })
}

impl Call {
    fn run(&self) -> Result<Array> {
        let mut outs = self.library.dispatch(self.device, &self.args, &self.launch)?;
        match outs.len() {
            1 => Ok(outs.remove(0)),
            n => Err(Error::invalid("gdn_kkt", format!("expected one output, got {n}"))),
        }
    }
}

/// `A` (B, T, H, BT) for keys `k` (B, T, Hg, K), `beta` and cumulative gates `g` (B, T, H).
pub fn gdn_kkt(k: &Array, beta: &Array, g: &Array, heads: usize) -> Result<Array> {
    prepare(k, beta, g, heads)?.run()
}

/// One verified run; `dims` = `[B, T, Hg, H, K]`.
pub fn check(device: Device, dtype: DType, dims: [usize; 5], seed: u64) -> Result<Outcome> {
    let [b, t, hg, h, kd] = dims;
    let mut rng = Rng::new(seed);
    let (k, kv) = normal_input(&mut rng, device, dtype, &[b, t, hg, kd], 0.3)?;
    let (beta, bv) = host_input(DType::F32, &[b, t, h], &rng.uniforms(b * t * h, 0.1, 1.0))?;
    // Cumulative log gates: decreasing along the sequence, as log-sigmoid sums are.
    let mut gv = vec![0.0; b * t * h];
    for bi in 0..b {
        for hi in 0..h {
            let mut acc = 0.0;
            for ti in 0..t {
                acc -= rng.uniform(0.01, 0.2);
                gv[(bi * t + ti) * h + hi] = acc;
            }
        }
    }
    let (g, gv) = host_input(DType::F32, &[b, t, h], &gv)?;
    let call = prepare(&k, &beta.to_device(device)?, &g.to_device(device)?, h)?;
    call.run()?;
    let start = Instant::now();
    let out = call.run()?.to_host()?;
    let time = start.elapsed();
    let reference = kiln::ops::gdn_kkt::reference_in_chunks(&kv, &bv, &gv, dims, dtype, BT);
    let parts = vec![Part { name: "A", output: values(&out)?, reference }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, [2, 77, 2, 4, 80], seed)
}
