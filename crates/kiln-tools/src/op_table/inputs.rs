//! The inputs of one run of an op: each input's shape, dtype and how its values are drawn
//! ([`InputSpec`], [`Fill`]), and the op's parameters ([`Setup`]).

use kiln::check::Rng;
use kiln::dtype::DType;

/// How an input's values are drawn (never all zeros).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// Uniform in [lo, hi).
    Uniform(f64, f64),
    /// Symmetric with a dominant diagonal (positive definite) over the last two axes.
    Spd,
    /// Integers in 0..bins.
    Indices(usize),
    /// Log gates of shape (B, T, H): running sums of U(-0.1, 0) along T, restarting every
    /// `chunk` steps, as a gated delta net produces them.
    LogGates {
        /// The steps between restarts.
        chunk: usize,
    },
}

/// One input of a [`Setup`].
#[derive(Clone, Debug)]
pub struct InputSpec {
    /// The input's shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
    /// How its values are drawn.
    pub fill: Fill,
}

impl InputSpec {
    /// An input of `shape` and `dtype` drawn as `fill` says.
    pub fn new(shape: &[usize], dtype: DType, fill: Fill) -> Self {
        InputSpec { shape: shape.to_vec(), dtype, fill }
    }

    /// Values drawn from `rng` as the fill says (not yet rounded to the dtype).
    pub fn draw(&self, rng: &mut Rng) -> Vec<f64> {
        let n: usize = self.shape.iter().product();
        match self.fill {
            Fill::Uniform(lo, hi) => rng.uniforms(n, lo, hi),
            Fill::Indices(bins) => (0..n).map(|_| (rng.next_u64() % bins.max(1) as u64) as f64).collect(),
            Fill::Spd => {
                let m = self.shape.last().copied().unwrap_or(1).max(1);
                let mut a = vec![0.0; n];
                for mat in a.chunks_mut(m * m) {
                    for i in 0..m {
                        for j in 0..i {
                            let v = rng.uniform(-1.0, 1.0);
                            mat[i * m + j] = v;
                            mat[j * m + i] = v;
                        }
                        mat[i * m + i] = m as f64 + rng.uniform(0.0, 1.0);
                    }
                }
                a
            }
            Fill::LogGates { chunk } => {
                let (t, h) = match self.shape[..] {
                    [_, t, h] => (t, h),
                    _ => (n, 1),
                };
                let mut g = rng.uniforms(n, -0.1, 0.0);
                for (i, step) in (0..n / h.max(1)).map(|i| (i, i % t.max(1))) {
                    if step % chunk.max(1) != 0 {
                        for hi in 0..h {
                            g[i * h + hi] += g[(i - 1) * h + hi];
                        }
                    }
                }
                g
            }
        }
    }
}

/// The inputs of a run at given sizes and the op's parameters (as its registry entry's `plan`
/// takes them).
#[derive(Clone, Debug)]
pub struct Setup {
    /// The inputs, in the order `plan` takes them.
    pub inputs: Vec<InputSpec>,
    /// The op's parameters.
    pub params: Vec<f64>,
    /// The dtype whose tolerance a check of its outputs applies (theirs).
    pub tolerance: DType,
}
