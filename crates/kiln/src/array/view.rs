//! Views that share storage: NumPy basic slicing (negative steps included), axis permutation and
//! broadcasting (zero strides). Nothing here copies data.

use super::{row_major_strides, Array, Shape, Strides};
use crate::error::{Error, Result};

/// One axis of a NumPy basic slice, `start:stop:step`; `None` means "omitted".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceArg {
    /// First index (negative: from the end); `None` is the start of the step's direction.
    pub start: Option<isize>,
    /// One past the last index (negative: from the end); `None` runs to the end.
    pub stop: Option<isize>,
    /// The step, never zero; negative walks backwards.
    pub step: isize,
}

impl SliceArg {
    /// The whole axis (`:`).
    pub const FULL: SliceArg = SliceArg { start: None, stop: None, step: 1 };

    /// Parses a NumPy slice expression such as `"::2, 1:-1, ::-1"`, one part per leading axis.
    /// A bare integer part selects a range of one (the axis is kept).
    pub fn parse_list(text: &str) -> Result<Vec<SliceArg>> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Vec::new());
        }
        text.split(',').map(|part| SliceArg::parse(part.trim())).collect()
    }

    fn parse(part: &str) -> Result<SliceArg> {
        let bad = |why: &str| Error::invalid("slice", format!("malformed slice part {part:?}: {why}"));
        let num = |s: &str| -> Result<Option<isize>> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<isize>().map(Some).map_err(|_| bad("expected an integer"))
        };
        let pieces: Vec<&str> = part.split(':').collect();
        match pieces.as_slice() {
            [single] => {
                let i = num(single)?.ok_or_else(|| bad("empty part"))?;
                let stop = if i == -1 { None } else { Some(i + 1) };
                Ok(SliceArg { start: Some(i), stop, step: 1 })
            }
            [a, b] => Ok(SliceArg { start: num(a)?, stop: num(b)?, step: 1 }),
            [a, b, c] => {
                let step = num(c)?.unwrap_or(1);
                if step == 0 {
                    return Err(bad("step cannot be zero"));
                }
                Ok(SliceArg { start: num(a)?, stop: num(b)?, step })
            }
            _ => Err(bad("too many ':'")),
        }
    }

    /// Resolves against an axis of extent `n`: (first index, count, step), NumPy's rules.
    fn resolve(&self, n: usize) -> (usize, usize, isize) {
        let n = n as isize;
        let step = self.step;
        let clamp = |v: isize, lo: isize, hi: isize| v.max(lo).min(hi);
        let norm = |v: isize| if v < 0 { v + n } else { v };
        let (start, stop) = if step > 0 {
            let start = self.start.map_or(0, |s| clamp(norm(s), 0, n));
            let stop = self.stop.map_or(n, |s| clamp(norm(s), 0, n));
            (start, stop)
        } else {
            let start = self.start.map_or(n - 1, |s| clamp(norm(s), -1, n - 1));
            let stop = self.stop.map_or(-1, |s| clamp(norm(s), -1, n - 1));
            (start, stop)
        };
        let count = if step > 0 {
            if stop > start {
                (stop - start + step - 1) / step
            } else {
                0
            }
        } else if start > stop {
            (start - stop + (-step) - 1) / (-step)
        } else {
            0
        };
        (start.max(0) as usize, count as usize, step)
    }
}

impl Array {
    /// NumPy basic slicing; `args` covers the leading axes, the rest are taken whole.
    pub fn slice(&self, args: &[SliceArg]) -> Result<Array> {
        if args.len() > self.ndim() {
            return Err(Error::invalid(
                "slice",
                format!("{} slice parts for an array of {} dimensions", args.len(), self.ndim()),
            ));
        }
        let mut offset = self.offset as isize;
        let mut shape = self.shape.clone();
        let mut strides = self.strides.clone();
        for (ax, arg) in args.iter().enumerate() {
            let (start, count, step) = arg.resolve(self.shape[ax]);
            if count > 0 {
                offset += start as isize * self.strides[ax];
            }
            shape[ax] = count;
            strides[ax] = self.strides[ax] * step;
        }
        Ok(self.with_view(offset as usize, shape, strides))
    }

    /// Permutes the axes: axis `i` of the result is axis `perm[i]` of `self`.
    pub fn transpose(&self, perm: &[usize]) -> Result<Array> {
        let nd = self.ndim();
        let mut seen = vec![false; nd];
        if perm.len() != nd || perm.iter().any(|&p| p >= nd || std::mem::replace(&mut seen[p], true)) {
            return Err(Error::invalid(
                "transpose",
                format!("{perm:?} is not a permutation of the {nd} axes of shape {:?}", self.shape),
            ));
        }
        let shape: Shape = perm.iter().map(|&p| self.shape[p]).collect();
        let strides: Strides = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(self.with_view(self.offset, shape, strides))
    }

    /// Reverses the axes (matrix transpose for 2-D arrays).
    pub fn t(&self) -> Array {
        let shape: Shape = self.shape.iter().rev().copied().collect();
        let strides: Strides = self.strides.iter().rev().copied().collect();
        self.with_view(self.offset, shape, strides)
    }

    /// NumPy broadcasting to `shape`: new leading axes and extent-1 axes get stride 0.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Array> {
        let nd = self.ndim();
        let err = || Error::shape("broadcast_to", format!("cannot broadcast shape {:?} to {:?}", self.shape, shape));
        if shape.len() < nd {
            return Err(err());
        }
        let lead = shape.len() - nd;
        let mut strides = vec![0isize; shape.len()];
        for ax in 0..nd {
            let (have, want) = (self.shape[ax], shape[lead + ax]);
            strides[lead + ax] = if have == want {
                self.strides[ax]
            } else if have == 1 {
                0
            } else {
                return Err(err());
            };
        }
        Ok(self.with_view(self.offset, shape.to_vec(), strides))
    }

    /// A view with a new shape of the same size; only for row-contiguous arrays (others must be
    /// copied with `to_row_contiguous` first).
    pub fn reshape(&self, shape: &[usize]) -> Result<Array> {
        if super::checked_size(shape) != Some(self.size()) {
            return Err(Error::shape("reshape", format!("cannot reshape {:?} to {:?}", self.shape, shape)));
        }
        if !self.is_row_contiguous() {
            return Err(Error::invalid("reshape", "array is not row-contiguous; copy it first"));
        }
        Ok(self.with_view(self.offset, shape.to_vec(), row_major_strides(shape)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(shape: &[usize]) -> Array {
        let n: usize = shape.iter().product();
        Array::from_vec(shape, (0..n as i32).collect()).unwrap()
    }

    #[test]
    fn negative_step_slice_reverses_without_copy() {
        let a = iota(&[10]);
        let s = a.slice(&SliceArg::parse_list("::-3").unwrap()).unwrap();
        assert_eq!(s.to_vec::<i32>().unwrap(), vec![9, 6, 3, 0]);
        assert_eq!(s.strides(), &[-3]);
        assert!(std::sync::Arc::ptr_eq(s.storage(), a.storage()));
        let s = a.slice(&SliceArg::parse_list("7:2:-2").unwrap()).unwrap();
        assert_eq!(s.to_vec::<i32>().unwrap(), vec![7, 5, 3]);
        let s = a.slice(&SliceArg::parse_list("-2:").unwrap()).unwrap();
        assert_eq!(s.to_vec::<i32>().unwrap(), vec![8, 9]);
        let s = a.slice(&SliceArg::parse_list("5:2").unwrap()).unwrap();
        assert_eq!(s.size(), 0);
    }

    #[test]
    fn two_axis_slice_and_transpose_compose() {
        let a = iota(&[4, 6]);
        let s = a.slice(&SliceArg::parse_list("::2, 1::-1").unwrap()).unwrap();
        assert_eq!(s.shape(), &[2, 2]);
        assert_eq!(s.to_vec::<i32>().unwrap(), vec![1, 0, 13, 12]);
        let t = a.transpose(&[1, 0]).unwrap();
        assert_eq!(t.shape(), &[6, 4]);
        assert!(!t.is_row_contiguous());
        assert_eq!(&t.to_vec::<i32>().unwrap()[..4], &[0, 6, 12, 18]);
        assert!(a.transpose(&[0, 0]).is_err());
    }

    #[test]
    fn broadcast_uses_zero_strides() {
        let a = iota(&[3, 1]);
        let b = a.broadcast_to(&[2, 3, 4]).unwrap();
        assert_eq!(b.strides(), &[0, 1, 0]);
        let v = b.to_vec::<i32>().unwrap();
        assert_eq!(&v[..8], &[0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(v.len(), 24);
        assert!(a.broadcast_to(&[3, 5]).is_ok());
        assert!(a.broadcast_to(&[4, 4]).is_err());
    }

    #[test]
    fn malformed_slices_are_errors() {
        assert!(SliceArg::parse_list("::0").is_err());
        assert!(SliceArg::parse_list("a:b").is_err());
        assert!(SliceArg::parse_list("1:2:3:4").is_err());
        assert!(iota(&[3]).slice(&SliceArg::parse_list(":, :").unwrap()).is_err());
    }

    #[test]
    fn contiguity_ignores_unit_axes() {
        let a = iota(&[4, 6]);
        assert!(a.is_row_contiguous());
        let row = a.slice(&SliceArg::parse_list("1:2").unwrap()).unwrap();
        assert!(row.is_row_contiguous());
        assert_eq!(row.offset(), 6);
        let col = a.slice(&SliceArg::parse_list(":, 1:2").unwrap()).unwrap();
        assert!(!col.is_row_contiguous());
    }
}
