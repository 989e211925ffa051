//! `Dim3`: the extents of a grid or threadgroup as a caller has them (`usize` sizes, arrays,
//! tuples, one number), checked against the `u32` a launch counts in when the call is made,
//! so no size is ever cast silently.

use crate::error::{Error, Result};

/// Three extents (x, y, z) of a grid or threadgroup, from `[u32; 3]`, `[usize; 3]`, `[i32; 3]`,
/// the same as tuples, or one number for `(n, 1, 1)`. Values are kept as given and checked
/// when the launch is built: a negative extent or one above `u32::MAX` is an error naming it.
///
/// ```
/// use kiln::Dim3;
/// let n: usize = 4096;
/// assert_eq!(Dim3::from(n).to_u32("grid"), Ok([4096, 1, 1]));
/// assert_eq!(Dim3::from((n / 64, 2usize, 1usize)).to_u32("grid"), Ok([64, 2, 1]));
/// assert!(Dim3::from([1usize << 33, 1, 1]).to_u32("grid").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim3([i128; 3]);

impl Dim3 {
    /// The extents as given.
    pub fn extents(self) -> [i128; 3] {
        self.0
    }

    /// The extents as `u32`, or a message naming `what` (`"grid"`, `"threadgroup"`) when one is
    /// negative or above `u32::MAX`.
    pub fn to_u32(self, what: &str) -> std::result::Result<[u32; 3], String> {
        let [x, y, z] = self.0;
        match (u32::try_from(x), u32::try_from(y), u32::try_from(z)) {
            (Ok(x), Ok(y), Ok(z)) => Ok([x, y, z]),
            _ => Err(format!(
                "{what} {:?} has an extent outside 0..={} (a launch counts threads in u32)",
                self.0,
                u32::MAX
            )),
        }
    }

    /// As [`Dim3::to_u32`], with the message as an error of `op`.
    pub fn to_u32_for(self, op: &str, what: &str) -> Result<[u32; 3]> {
        self.to_u32(what).map_err(|msg| Error::invalid(op, msg))
    }
}

macro_rules! dim3_from {
    ($($t:ty),*) => {$(
        impl From<[$t; 3]> for Dim3 {
            fn from([x, y, z]: [$t; 3]) -> Self {
                Dim3([x as i128, y as i128, z as i128])
            }
        }
        impl From<($t, $t, $t)> for Dim3 {
            fn from((x, y, z): ($t, $t, $t)) -> Self {
                Dim3([x as i128, y as i128, z as i128])
            }
        }
        impl From<$t> for Dim3 {
            /// `(n, 1, 1)`.
            fn from(n: $t) -> Self {
                Dim3([n as i128, 1, 1])
            }
        }
    )*};
}
// i32 is here so that integer literals (`[64, 1, 1]`), which default to i32, are accepted.
dim3_from!(u32, usize, u64, i32, i64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_gives_the_same_extents_and_out_of_range_ones_are_named() {
        let want = Ok([64, 2, 1]);
        assert_eq!(Dim3::from([64u32, 2, 1]).to_u32("grid"), want);
        assert_eq!(Dim3::from([64usize, 2, 1]).to_u32("grid"), want);
        assert_eq!(Dim3::from((64usize, 2usize, 1usize)).to_u32("grid"), want);
        assert_eq!(Dim3::from([64, 2, 1]).to_u32("grid"), want);
        assert_eq!(Dim3::from(64usize).to_u32("grid"), Ok([64, 1, 1]));
        assert_eq!(Dim3::from(u32::MAX as usize).to_u32("grid"), Ok([u32::MAX, 1, 1]));
        let msg = Dim3::from([1usize << 32, 1, 1]).to_u32("grid").unwrap_err();
        assert!(msg.starts_with("grid [4294967296, 1, 1]") && msg.contains("u32"), "{msg}");
        let msg = Dim3::from([4, -1, 1]).to_u32("threadgroup").unwrap_err();
        assert!(msg.starts_with("threadgroup [4, -1, 1]"), "{msg}");
    }
}
