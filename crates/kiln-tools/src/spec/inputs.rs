//! Spec-file inputs: a `.npy` file seen through the view keys (`dtype`, `slice`, `transpose`,
//! `broadcast_to`, applied in that order; strides are kept), or a `scalar`.

use toml::Value;

use super::toml_access::{usize_list, Section};
use kiln::array::npy::{read_npy, NpyData};
use kiln::array::{Array, SliceArg};
use kiln::dtype::DType;
use kiln::error::Error;
use kiln::kernel::KernelInput;

/// The keys of an `[[input]]` table (and of a `[[buffer]]` that holds an input file).
pub(crate) const VIEW_KEYS: [&str; 5] = ["file", "dtype", "slice", "transpose", "broadcast_to"];

/// Loads `file` relative to the spec's directory and applies the view keys.
pub(crate) fn load_view(sec: &Section<'_>) -> Result<Array, Error> {
    let rel = sec.req_str("file")?;
    let path = sec.file.parent().map(|d| d.join(rel)).unwrap_or_else(|| rel.into());
    let cast = sec.dtype("dtype")?;
    let mut a = match read_npy(&path).map_err(|e| sec.err("file", e.to_string()))? {
        NpyData::Array(a) => match cast {
            Some(dtype) => a.astype(dtype).map_err(|e| sec.err("dtype", e.to_string()))?,
            None => a,
        },
        NpyData::Float64 { shape, values } => match cast {
            // One rounding, from the file's own values.
            Some(dtype) => Array::from_f64(dtype, &shape, &values).map_err(|e| sec.err("dtype", e.to_string()))?,
            None => {
                return Err(sec.err(
                    "file",
                    format!(
                        "{}: holds float64 data, which kiln has no dtype for (Metal has no double); add \
                         dtype = \"float32\" (or another dtype) to this table to convert it when loading",
                        path.display()
                    ),
                ))
            }
        },
    };
    if let Some(text) = sec.str("slice")? {
        a = index(&a, text).map_err(|msg| sec.err("slice", msg))?;
    }
    if sec.has("transpose") {
        let perm = sec.usizes("transpose")?;
        a = a.transpose(&perm).map_err(|e| sec.err("transpose", e.to_string()))?;
    }
    if sec.has("broadcast_to") {
        let shape = sec.usizes("broadcast_to")?;
        a = a.broadcast_to(&shape).map_err(|e| sec.err("broadcast_to", e.to_string()))?;
    }
    Ok(a)
}

/// NumPy basic indexing of `a` by `text`, one comma-separated part per leading axis: a slice
/// `start:stop:step` keeps its axis; an integer (negative counts from the end) selects one index
/// and drops the axis, and must lie within the axis. Strides are kept (no copy).
fn index(a: &Array, text: &str) -> Result<Array, String> {
    let text = text.trim();
    let parts: Vec<&str> = if text.is_empty() { Vec::new() } else { text.split(',').map(str::trim).collect() };
    if parts.len() > a.ndim() {
        return Err(format!("{} index parts for an array of {} dimensions {:?}", parts.len(), a.ndim(), a.shape()));
    }
    let mut slices = Vec::with_capacity(parts.len());
    let mut dropped = Vec::new();
    for (axis, part) in parts.iter().enumerate() {
        if part.contains(':') {
            let mut one = SliceArg::parse_list(part).map_err(|e| e.to_string())?;
            slices.append(&mut one);
            continue;
        }
        let i: i64 = part
            .parse()
            .map_err(|_| format!("malformed index part {part:?}: expected an integer or start:stop:step"))?;
        let n = a.shape()[axis] as i64;
        let at = if i < 0 { i + n } else { i };
        if !(0..n).contains(&at) {
            return Err(format!("index {i} is out of bounds for axis {axis} with size {n}"));
        }
        slices.push(SliceArg { start: Some(at as isize), stop: Some(at as isize + 1), step: 1 });
        dropped.push(axis);
    }
    let view = a.slice(&slices).map_err(|e| e.to_string())?;
    if dropped.is_empty() {
        return Ok(view);
    }
    // Each indexed axis now has extent 1 and its element is at the view's offset.
    let kept: Vec<usize> = (0..view.ndim()).filter(|axis| !dropped.contains(axis)).collect();
    let shape: Vec<usize> = kept.iter().map(|&axis| view.shape()[axis]).collect();
    let strides: Vec<isize> = kept.iter().map(|&axis| view.strides()[axis]).collect();
    view.as_strided(view.offset(), &shape, &strides).map_err(|e| e.to_string())
}

/// One `[[input]]`: a file view or a scalar.
pub(crate) fn load_input(sec: &Section<'_>) -> Result<KernelInput, Error> {
    if sec.has("scalar") {
        sec.only_keys(&["scalar", "dtype"])?;
        let value = sec.require("scalar")?;
        let input = match value {
            Value::Boolean(b) => KernelInput::Bool(*b),
            Value::Integer(i) => KernelInput::Int(*i),
            Value::Float(f) => KernelInput::Float(*f),
            v => return Err(sec.err("scalar", format!("expected a boolean or a number, found {}", v.type_str()))),
        };
        return match sec.dtype("dtype")? {
            None => Ok(input),
            Some(dtype) => {
                let a = Array::from_bytes(dtype, &[], &number_bytes(value, dtype))
                    .map_err(|e| sec.err("scalar", e.to_string()))?;
                Ok(KernelInput::Array(a))
            }
        };
    }
    sec.only_keys(&VIEW_KEYS)?;
    Ok(KernelInput::Array(load_view(sec)?))
}

/// `values = [...]` with an optional `dtype` (inferred like scalars: bool, int32, float32).
pub(crate) fn load_values(sec: &Section<'_>) -> Result<Array, Error> {
    let items = sec.array("values")?;
    let (mut any_float, mut all_bool) = (false, !items.is_empty());
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Integer(_) => all_bool = false,
            Value::Float(_) => {
                any_float = true;
                all_bool = false;
            }
            Value::Boolean(_) => {}
            v => return Err(sec.err(&format!("values[{i}]"), format!("expected a number, found {}", v.type_str()))),
        }
    }
    let dtype = match sec.dtype("dtype")? {
        Some(d) => d,
        None if all_bool => DType::Bool,
        None if any_float => DType::F32,
        None => DType::I32,
    };
    let bytes: Vec<u8> = items.iter().flat_map(|item| number_bytes(item, dtype)).collect();
    Array::from_bytes(dtype, &[items.len()], &bytes).map_err(|e| sec.err("values", e.to_string()))
}

/// `fields = [["float32", 1e-5], ["uint32", 8], ...]` packed as a C struct: each field aligned to
/// its size, the whole padded to the largest alignment.
pub(crate) fn pack_fields(sec: &Section<'_>) -> Result<Vec<u8>, Error> {
    let items = sec.array("fields")?;
    let mut bytes = Vec::new();
    let mut max_align = 1usize;
    for (i, item) in items.iter().enumerate() {
        let key = format!("fields[{i}]");
        let pair = match item {
            Value::Array(p) if p.len() == 2 => p,
            _ => return Err(sec.err(&key, "expected a [dtype, value] pair")),
        };
        let dtype = match &pair[0] {
            Value::String(s) => {
                DType::from_name(s).ok_or_else(|| sec.err(&key, super::toml_access::unknown_dtype(s)))?
            }
            v => return Err(sec.err(&key, format!("expected a dtype name first, found {}", v.type_str()))),
        };
        let value = match &pair[1] {
            v @ (Value::Integer(_) | Value::Float(_) | Value::Boolean(_)) => v,
            v => return Err(sec.err(&key, format!("expected a number second, found {}", v.type_str()))),
        };
        let size = dtype.size();
        max_align = max_align.max(size);
        while bytes.len() % size != 0 {
            bytes.push(0);
        }
        bytes.extend(number_bytes(value, dtype));
    }
    while bytes.len() % max_align != 0 {
        bytes.push(0);
    }
    Ok(bytes)
}

/// A shape list at `key` of `sec`.
pub(crate) fn shape_at(sec: &Section<'_>, key: &str) -> Result<Vec<usize>, Error> {
    usize_list(sec.file, &sec.key_path(key), sec.require(key)?)
}

/// A number written in a spec (boolean, integer or float) as one element of `dtype`: integers
/// convert from their exact value, floats from their f64, each rounding once.
fn number_bytes(value: &Value, dtype: DType) -> Vec<u8> {
    match value {
        Value::Integer(n) => kiln::dtype::int_literal_to_element_bytes(*n, dtype),
        Value::Boolean(b) => kiln::dtype::int_literal_to_element_bytes(i64::from(*b), dtype),
        Value::Float(f) => kiln::dtype::f64_to_element_bytes(*f, dtype),
        _ => kiln::dtype::f64_to_element_bytes(0.0, dtype),
    }
}
