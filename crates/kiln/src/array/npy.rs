//! `.npy` (NumPy format 1.0/2.0/3.0) load and save for every kiln dtype. bfloat16 has no NumPy
//! type: it is saved as float32, exactly widened.

use std::path::Path;

use super::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::BF16 | DType::F32 => "<f4",
    }
}

fn parse_descr(d: &str) -> Option<DType> {
    let (order, code) = d.split_at(1);
    if order == ">" && !code.ends_with('1') {
        return None; // big-endian multi-byte data
    }
    Some(match code {
        "b1" => DType::Bool,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "f2" => DType::F16,
        "f4" => DType::F32,
        _ => return None,
    })
}

impl Array {
    /// Encodes as `.npy` bytes (host arrays; bfloat16 widened to float32).
    pub fn to_npy_bytes(&self) -> Result<Vec<u8>> {
        let arr = if self.dtype() == DType::BF16 { self.astype(DType::F32)? } else { self.clone() };
        let shape = match arr.shape() {
            [] => "()".to_string(),
            [n] => format!("({n},)"),
            s => format!("({})", s.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr(arr.dtype()), shape);
        // Pad so that magic + version + length + header + '\n' is a multiple of 64 bytes.
        let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
        header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(header.len() + 10 + arr.nbytes());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend(arr.to_contiguous_bytes()?);
        Ok(out)
    }

    /// Writes a `.npy` file.
    pub fn save_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_npy_bytes().map_err(|e| Error::Npy { path: path.into(), msg: e.to_string() })?;
        std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
    }

    /// Reads a `.npy` file into a row-contiguous host array.
    pub fn load_npy(path: impl AsRef<Path>) -> Result<Array> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Array::from_npy_bytes(&bytes).map_err(|msg| Error::Npy { path: path.into(), msg })
    }

    /// Decodes `.npy` bytes.
    pub fn from_npy_bytes(bytes: &[u8]) -> std::result::Result<Array, String> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err("not a .npy file (bad magic)".into());
        }
        let (header_len, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
            v => return Err(format!("unsupported .npy version {v}")),
        };
        let header = bytes
            .get(start..start + header_len)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or("truncated or non-text .npy header")?;
        let field = |key: &str| -> std::result::Result<&str, String> {
            let at = header.find(&format!("'{key}'")).ok_or(format!("header lacks '{key}'"))?;
            let rest = &header[at + key.len() + 2..];
            let colon = rest.find(':').ok_or(format!("malformed '{key}' entry"))?;
            Ok(rest[colon + 1..].trim_start())
        };
        let d = field("descr")?;
        let d = d.strip_prefix('\'').and_then(|s| s.split('\'').next()).ok_or("malformed descr")?;
        let dtype = parse_descr(d).ok_or(format!("unsupported dtype {d:?}"))?;
        if field("fortran_order")?.starts_with("True") {
            return Err("Fortran-ordered arrays are not supported".into());
        }
        let s = field("shape")?;
        let s = s.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or("malformed shape")?;
        let shape = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| p.trim_end_matches('L').parse::<usize>().map_err(|_| format!("bad shape entry {p:?}")))
            .collect::<std::result::Result<Vec<usize>, String>>()?;
        let data = &bytes[start + header_len..];
        let want = shape.iter().product::<usize>() * dtype.size();
        if data.len() < want {
            return Err(format!("data holds {} bytes, shape {:?} of {} needs {}", data.len(), shape, dtype, want));
        }
        Array::from_bytes(dtype, &shape, &data[..want]).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        for dtype in DType::ALL {
            let values: Vec<f64> = (0..12).map(|i| (i as f64 - 5.0) * 0.75).collect();
            let a = Array::from_f64(dtype, &[3, 4], &values).unwrap();
            let back = Array::from_npy_bytes(&a.to_npy_bytes().unwrap()).unwrap();
            let expect_dtype = if dtype == DType::BF16 { DType::F32 } else { dtype };
            assert_eq!(back.dtype(), expect_dtype);
            assert_eq!(back.shape(), &[3, 4]);
            assert_eq!(back.to_f64_vec().unwrap(), a.to_f64_vec().unwrap(), "{dtype}");
        }
    }

    #[test]
    fn round_trip_scalar_and_strided_view() {
        let s = Array::scalar(7.25f32);
        let back = Array::from_npy_bytes(&s.to_npy_bytes().unwrap()).unwrap();
        assert_eq!(back.shape(), &[] as &[usize]);
        assert_eq!(back.to_vec::<f32>().unwrap(), vec![7.25]);
        let a = Array::from_vec(&[2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap().t();
        let back = Array::from_npy_bytes(&a.to_npy_bytes().unwrap()).unwrap();
        assert_eq!(back.to_vec::<i64>().unwrap(), vec![1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn header_is_64_byte_aligned_and_bad_files_are_rejected() {
        let a = Array::full(DType::F32, &[5], 1.0).unwrap();
        let bytes = a.to_npy_bytes().unwrap();
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        assert!(Array::from_npy_bytes(b"garbage").is_err());
        assert!(Array::from_npy_bytes(&bytes[..bytes.len() - 4]).is_err());
    }
}
