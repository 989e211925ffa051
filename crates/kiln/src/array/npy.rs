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

/// The element type of a `.npy` file: a kiln dtype, or float64 (NumPy's default float, which
/// kiln has no dtype for since Metal has no double; it is loaded only with a conversion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NpyElement {
    Kiln(DType),
    Float64,
}

/// The element type of a `descr` entry, or why it cannot be loaded.
fn parse_descr(d: &str) -> std::result::Result<NpyElement, String> {
    let Some(order) = d.chars().next() else { return Err("empty descr".into()) };
    let code = &d[order.len_utf8()..];
    if !matches!(order, '<' | '|' | '=' | '>') {
        return Err(format!("unsupported dtype {d:?}"));
    }
    if order == '>' && !code.ends_with('1') {
        return Err(format!(
            "big-endian data ({d:?}) is not supported; save it little-endian (a.astype(a.dtype.newbyteorder('<')))"
        ));
    }
    let unsupported = |what: &str, fix: &str| Err(format!("{what} ({d:?}) has no kiln dtype; {fix}"));
    Ok(NpyElement::Kiln(match code {
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
        "f8" => return Ok(NpyElement::Float64),
        "f12" | "f16" => return unsupported("extended-precision float data", "save it as float32"),
        "c8" | "c16" | "c32" => {
            return unsupported("complex data", "save the real and imaginary parts (a.real, a.imag) as separate arrays")
        }
        "O" => return Err("object arrays (pickled Python objects) cannot be loaded; save a numeric array".into()),
        c if c.starts_with('M') || c.starts_with('m') => {
            return unsupported("datetime data", "save it as integers (a.astype('int64'))")
        }
        c if c.starts_with('U') || c.starts_with('S') || c.starts_with('a') => {
            return unsupported("string data", "save a numeric array")
        }
        c if c.starts_with('V') => return unsupported("raw (void) data", "save a numeric array"),
        _ => return Err(format!("unsupported dtype {d:?}")),
    }))
}

/// What a `.npy` file holds: a kiln array, or float64 values (converted only on request).
pub enum NpyData {
    /// Data in one of kiln's dtypes.
    Array(Array),
    /// float64 data, kept as values until a dtype is chosen.
    Float64 {
        /// The array's shape.
        shape: Vec<usize>,
        /// The values in row-major order.
        values: Vec<f64>,
    },
}

/// Fails unless `path` is a regular file (following links). A FIFO, device or socket would block
/// or never end when read; the check looks at the file without opening it.
pub fn check_regular_file(path: &Path) -> std::result::Result<(), String> {
    let kind = std::fs::metadata(path).map_err(|e| e.to_string())?.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() { "a directory" } else { special_kind(&kind) };
    Err(format!("is {what}, not a regular file; inputs are read only from regular files"))
}

#[cfg(unix)]
fn special_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "a special file"
}

/// Reads a `.npy` file from a regular file.
pub fn read_npy(path: &Path) -> Result<NpyData> {
    let npy_err = |msg: String| Error::Npy { path: path.into(), msg };
    check_regular_file(path).map_err(npy_err)?;
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode(&bytes).map_err(npy_err)
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

    /// Reads a `.npy` file into a row-contiguous host array (Fortran-ordered data is converted to
    /// row-major order). float64 data needs a conversion: [`Array::load_npy_as`].
    pub fn load_npy(path: impl AsRef<Path>) -> Result<Array> {
        let path = path.as_ref();
        match read_npy(path)? {
            NpyData::Array(a) => Ok(a),
            NpyData::Float64 { .. } => Err(Error::Npy {
                path: path.into(),
                msg: "holds float64 data, which kiln has no dtype for (Metal has no double); load it converted, \
                      with Array::load_npy_as(path, DType::F32)"
                    .into(),
            }),
        }
    }

    /// Reads a `.npy` file converted to `dtype` (a numeric cast as [`Array::astype`]; float64
    /// data is rounded once, straight from its own values).
    pub fn load_npy_as(path: impl AsRef<Path>, dtype: DType) -> Result<Array> {
        match read_npy(path.as_ref())? {
            NpyData::Array(a) => a.astype(dtype),
            NpyData::Float64 { shape, values } => Array::from_f64(dtype, &shape, &values),
        }
    }

    /// Decodes `.npy` bytes holding a kiln dtype.
    pub fn from_npy_bytes(bytes: &[u8]) -> std::result::Result<Array, String> {
        match decode(bytes)? {
            NpyData::Array(a) => Ok(a),
            NpyData::Float64 { .. } => Err("float64 data has no kiln dtype (Metal has no double)".into()),
        }
    }
}

fn decode(bytes: &[u8]) -> std::result::Result<NpyData, String> {
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
    if d.starts_with('[') {
        return Err("structured (record) dtypes are not supported; save each field as its own array".into());
    }
    let d = d.strip_prefix('\'').and_then(|s| s.split('\'').next()).ok_or("malformed descr")?;
    let element = parse_descr(d)?;
    let fortran = field("fortran_order")?.starts_with("True");
    let s = field("shape")?;
    let s = s.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or("malformed shape")?;
    let shape = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('L').parse::<usize>().map_err(|_| format!("bad shape entry {p:?}")))
        .collect::<std::result::Result<Vec<usize>, String>>()?;
    let elem_size = match element {
        NpyElement::Kiln(dtype) => dtype.size(),
        NpyElement::Float64 => 8,
    };
    let data = &bytes[start + header_len..];
    let want = crate::array::checked_size(&shape)
        .and_then(|n| n.checked_mul(elem_size))
        .ok_or_else(|| format!("shape {shape:?} is too large"))?;
    if data.len() < want {
        return Err(format!("data holds {} bytes, shape {:?} of {} needs {}", data.len(), shape, d, want));
    }
    let data = &data[..want];
    // Fortran order stores the transpose of the array row-major: read it so, then transpose back.
    let stored: Vec<usize> = if fortran { shape.iter().rev().copied().collect() } else { shape.clone() };
    match element {
        NpyElement::Kiln(dtype) => {
            let a = Array::from_bytes(dtype, &stored, data).map_err(|e| e.to_string())?;
            if !fortran {
                return Ok(NpyData::Array(a));
            }
            let back: Vec<usize> = (0..shape.len()).rev().collect();
            let a = a.transpose(&back).and_then(|t| t.to_row_contiguous()).map_err(|e| e.to_string())?;
            Ok(NpyData::Array(a))
        }
        NpyElement::Float64 => {
            let values: Vec<f64> = data
                .chunks_exact(8)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    f64::from_le_bytes(b)
                })
                .collect();
            let values = if fortran { fortran_to_row_major(&shape, &values) } else { values };
            Ok(NpyData::Float64 { shape, values })
        }
    }
}

/// Row-major order of values stored column-major for `shape`.
fn fortran_to_row_major(shape: &[usize], values: &[f64]) -> Vec<f64> {
    let mut col_strides = vec![1usize; shape.len()];
    for d in 1..shape.len() {
        col_strides[d] = col_strides[d - 1] * shape[d - 1];
    }
    let mut out = Vec::with_capacity(values.len());
    let mut index = vec![0usize; shape.len()];
    for _ in 0..values.len() {
        out.push(values[index.iter().zip(&col_strides).map(|(i, s)| i * s).sum::<usize>()]);
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
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
