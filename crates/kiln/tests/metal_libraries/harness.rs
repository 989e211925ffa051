//! What the run cases share: a corpus file as its library (opened once), the arguments as its
//! host code binds them (little-endian bytes of the parameter types), fresh outputs poisoned
//! with NaN (or all ones for integers), random inputs, and the checks against references.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch, MetalLibrary};

use super::corpus::CorpusFile;
use crate::common::{self, Rng};

/// The library of `library`'s file `path`, built once per process.
pub fn library(library: &'static str, path: &str) -> MetalLibrary {
    static OPEN: OnceLock<Mutex<HashMap<String, MetalLibrary>>> = OnceLock::new();
    let key = format!("{library}/{path}");
    let mut open = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    open.entry(key).or_insert_with(|| CorpusFile { library, path: path.to_string() }.library()).clone()
}

/// Runs `function` of the file and returns its outputs in slot order.
pub fn dispatch(device: Device, lib: &MetalLibrary, args: &[LibraryArg], launch: &LibraryLaunch) -> Vec<Array> {
    lib.dispatch(device, args, launch).unwrap_or_else(|e| panic!("{}:{}: {e}", lib.name(), launch.function))
}

/// Constant data: the bytes of `values` as `T`.
pub fn bytes<T: bytemuck_like::Pod>(values: &[T]) -> LibraryArg {
    LibraryArg::Bytes(values.iter().flat_map(|v| v.le_bytes()).collect())
}

/// A C struct of `fields` packed with C alignment (each field aligned to its own size).
pub fn fields(fields: &[Field]) -> LibraryArg {
    let mut out: Vec<u8> = Vec::new();
    let mut align = 1;
    for f in fields {
        let b = f.bytes();
        let a = b.len().min(8);
        align = align.max(a);
        while out.len() % a != 0 {
            out.push(0);
        }
        out.extend(b);
    }
    while out.len() % align != 0 {
        out.push(0);
    }
    LibraryArg::Bytes(out)
}

/// One field of a parameter struct.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    I32(i32),
    I64(i64),
    U64(u64),
    F32(f32),
    U16(u16),
}

impl Field {
    fn bytes(self) -> Vec<u8> {
        match self {
            Field::I32(v) => v.to_le_bytes().to_vec(),
            Field::I64(v) => v.to_le_bytes().to_vec(),
            Field::U64(v) => v.to_le_bytes().to_vec(),
            Field::F32(v) => v.to_le_bytes().to_vec(),
            Field::U16(v) => v.to_le_bytes().to_vec(),
        }
    }
}

/// Little-endian bytes of the scalar types parameters use.
pub mod bytemuck_like {
    pub trait Pod: Copy {
        fn le_bytes(self) -> Vec<u8>;
    }
    macro_rules! pod {
        ($($t:ty),*) => { $(impl Pod for $t { fn le_bytes(self) -> Vec<u8> { self.to_le_bytes().to_vec() } })* };
    }
    pod!(u8, u16, u32, u64, i32, i64, f32);
}

/// A fresh output poisoned so an element the kernel does not write fails the check.
pub fn output(shape: &[usize], dtype: DType) -> LibraryArg {
    let poison = if dtype.is_float() { f64::NAN } else { 1.0 };
    LibraryArg::Output { shape: shape.to_vec(), dtype, init_value: Some(poison) }
}

/// An input array on `device`.
pub fn input(device: Device, a: &Array) -> LibraryArg {
    LibraryArg::Array(a.to_device(device).expect("move input"))
}

/// Random normal values rounded to `dtype`, as an array and as the rounded values.
pub fn normals(rng: &mut Rng, dtype: DType, shape: &[usize], scale: f64) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let a = Array::from_f64(dtype, shape, &rng.normals(n, scale)).expect("array");
    let v = a.to_f64_vec().expect("values");
    (a, v)
}

/// Random q4_0 blocks (ggml-common.h `block_q4_0`, which candle's quantized.metal shares: a half
/// scale, 16 bytes of 4-bit quants, the low nibbles elements 0-15 and the high ones 16-31, each
/// (q - 8)·d) and their values.
pub fn q4_0_blocks(rng: &mut Rng, blocks: usize) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    for _ in 0..blocks {
        let d = kiln::f16::from_f64(rng.uniform(0.01, 0.2));
        bytes.extend(d.to_bits().to_le_bytes());
        let qs: Vec<u8> = (0..16).map(|_| (rng.next_u64() & 0xff) as u8).collect();
        bytes.extend(&qs);
        let d = d.to_f64();
        values.extend(qs.iter().map(|q| ((q & 15) as f64 - 8.0) * d));
        values.extend(qs.iter().map(|q| ((q >> 4) as f64 - 8.0) * d));
    }
    (bytes, values)
}

/// Random q8_0 blocks (ggml-common.h `block_q8_0`: a half scale and 32 signed bytes, each q·d)
/// and their values.
pub fn q8_0_blocks(rng: &mut Rng, blocks: usize) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    for _ in 0..blocks {
        let d = kiln::f16::from_f64(rng.uniform(0.002, 0.02));
        bytes.extend(d.to_bits().to_le_bytes());
        let qs: Vec<i8> = (0..32).map(|_| (rng.next_u64() & 0xff) as u8 as i8).collect();
        bytes.extend(qs.iter().map(|q| *q as u8));
        values.extend(qs.iter().map(|&q| q as f64 * d.to_f64()));
    }
    (bytes, values)
}

/// `x` rounded to `dtype` (the kernel's own rounding points).
pub fn round(dtype: DType, x: f64) -> f64 {
    Array::from_f64(dtype, &[1], &[x]).and_then(|a| a.to_f64_vec()).map_or(f64::NAN, |v| v[0])
}

/// candle's and ggml's `linear_split` (candle-metal-kernels/src/utils.rs:30-46): groups of
/// min(1024, n) threads, enough of them for `n`.
pub fn linear_split(n: usize) -> (usize, usize) {
    let width = n.clamp(1, 1024);
    (n.div_ceil(width), width)
}

/// Checks `out` against `reference` with the tolerance of `dtype` (exact for integers).
#[track_caller]
pub fn check(what: &str, out: &Array, reference: &[f64], dtype: DType) {
    assert_eq!(out.size(), reference.len(), "{what}: {} elements, reference has {}", out.size(), reference.len());
    if dtype.is_float() {
        common::assert_close(what, out, reference, dtype);
    } else {
        let got = out.to_host().and_then(|h| h.to_f64_vec()).expect("read output");
        let bad = got.iter().zip(reference).position(|(g, r)| g != r);
        assert!(
            bad.is_none(),
            "{what}: element {} is {}, want {}",
            bad.unwrap_or(0),
            got[bad.unwrap_or(0)],
            reference[bad.unwrap_or(0)]
        );
    }
}

/// erf(x) to double precision: the Maclaurin series below 3, the continued fraction of erfc
/// above (the references of GELU's exact form).
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    let v = if a < 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = exp(-a²)/sqrt(pi) · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...))))
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    v.copysign(x)
}
