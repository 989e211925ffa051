//! One `kiln.metal_kernel` call's keywords, checked once and carried: the inputs read as kiln
//! inputs (arrays of every framework through `lent.rs`, Python scalars by MLX's rules) with the
//! framework and device of the lead array, and the launch description. Each error is a
//! `kiln.KilnError` subclass whose message starts with the kernel (`[metal_kernel myexp]`) and
//! names the argument (`grid`, `output_shapes[1]`, `template 'N'`, `inputs[0] (x)`), as MLX's
//! keywords name them.

use std::sync::Mutex;
use std::time::Duration;

use kiln::{DType, Device, KernelInput, LaunchSpec};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};
use smallvec::SmallVec;

use crate::convert;
use crate::errors::to_py;
use crate::lent;
use crate::torch_call;

/// The framework a call's outputs come back in: that of its lead array (the first that is not
/// 0-d), or NumPy for a call of scalars only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lead {
    NumPy,
    /// PyTorch tensors on CUDA device `ordinal` (-1: CPU tensors).
    Torch(i64),
}

/// A call's inputs, read.
pub struct Inputs<'py> {
    pub values: Vec<KernelInput>,
    /// The lead array's framework, once an input of more than 0 dimensions set it.
    lead: Option<Lead>,
    /// The lead tensor (for its `device`), when the lead is a PyTorch tensor.
    pub lead_tensor: Option<Bound<'py, PyAny>>,
}

impl<'py> Inputs<'py> {
    /// The CUDA device of the lead tensor, if the call's inputs live on one.
    pub fn cuda_ordinal(&self) -> Option<usize> {
        match self.lead() {
            Lead::Torch(o) => usize::try_from(o).ok(),
            Lead::NumPy => None,
        }
    }

    /// Inputs read by another path than this module's (the MLX drop-in's, `mlx_host.rs`),
    /// NumPy their lead.
    pub fn read_elsewhere(values: Vec<KernelInput>) -> Self {
        Inputs { values, lead: None, lead_tensor: None }
    }

    /// The framework the outputs come back in (NumPy for a call of scalars only).
    pub fn lead(&self) -> Lead {
        self.lead.unwrap_or(Lead::NumPy)
    }

    /// Makes `array` (of framework `lead`, the tensor `tensor`) the lead unless one came before.
    fn offer_lead(&mut self, array: &kiln::Array, lead: Lead, tensor: Option<&Bound<'py, PyAny>>) {
        if self.lead.is_none() && array.ndim() > 0 {
            self.lead = Some(lead);
            self.lead_tensor = tensor.cloned();
        }
    }
}

/// One call's arguments, checked.
pub struct Call<'py> {
    pub inputs: Inputs<'py>,
    pub spec: LaunchSpec,
    /// `device=`, when given.
    pub device: Option<Device>,
    /// `device=` as the caller wrote it (for errors).
    pub device_text: Option<String>,
}

/// The keywords of a call, as given.
pub struct Keywords<'a, 'py> {
    pub inputs: &'a Bound<'py, PyAny>,
    pub output_shapes: &'a Bound<'py, PyAny>,
    pub output_dtypes: &'a Bound<'py, PyAny>,
    pub grid: Option<&'a Bound<'py, PyAny>>,
    pub threadgroup: Option<&'a Bound<'py, PyAny>>,
    pub template: Option<&'a Bound<'py, PyAny>>,
    pub init_value: Option<&'a Bound<'py, PyAny>>,
    pub device: Option<&'a Bound<'py, PyAny>>,
    pub timeout: Option<&'a Bound<'py, PyAny>>,
}

impl<'a, 'py> Keywords<'a, 'py> {
    /// The three keywords every call gives; the others left out.
    pub fn new(
        inputs: &'a Bound<'py, PyAny>,
        output_shapes: &'a Bound<'py, PyAny>,
        output_dtypes: &'a Bound<'py, PyAny>,
    ) -> Self {
        Keywords {
            inputs,
            output_shapes,
            output_dtypes,
            grid: None,
            threadgroup: None,
            template: None,
            init_value: None,
            device: None,
            timeout: None,
        }
    }
}

/// Checks every keyword of a call of kernel `op` (inputs named by `names`).
pub fn parse<'py>(
    op: &str,
    names: &[String],
    ensure_row_contiguous: bool,
    k: &Keywords<'_, 'py>,
) -> PyResult<Call<'py>> {
    let inputs = inputs(op, names, ensure_row_contiguous, k.inputs)?;
    parse_with_inputs(op, inputs, k)
}

/// [`parse`] of a call whose inputs were read already (`k.inputs` is not read again).
pub fn parse_with_inputs<'py>(op: &str, inputs: Inputs<'py>, k: &Keywords<'_, 'py>) -> PyResult<Call<'py>> {
    let shapes = sequence(op, "output_shapes", k.output_shapes)?;
    let mut output_shapes = Vec::with_capacity(shapes.len());
    for (i, s) in shapes.iter().enumerate() {
        output_shapes.push(shape(op, || format!("output_shapes[{i}]"), s)?);
    }
    let dtypes = sequence(op, "output_dtypes", k.output_dtypes)?;
    let mut output_dtypes = Vec::with_capacity(dtypes.len());
    for (i, d) in dtypes.iter().enumerate() {
        output_dtypes.push(dtype(op, || format!("output_dtypes[{i}]"), d)?);
    }
    let grid = k.grid.map(|g| dims(op, "grid", g)).transpose()?.unwrap_or([1, 1, 1]);
    let threadgroup = k.threadgroup.map(|t| dims(op, "threadgroup", t)).transpose()?.unwrap_or([1, 1, 1]);
    // Python callers pass MLX's keywords, so errors name them as MLX does.
    let mut spec = LaunchSpec::new(grid, threadgroup).mlx_keywords(true);
    spec.output_shapes = output_shapes.into_iter().map(Into::into).collect();
    spec.output_dtypes = output_dtypes.into();
    if let Some(t) = k.template {
        spec = template(op, t, spec)?;
    }
    spec.init_value = k.init_value.map(|v| init_value(op, v)).transpose()?.flatten();
    spec.timeout = k.timeout.map(|v| timeout(op, v)).transpose()?.flatten();
    let (device, device_text) = match k.device.filter(|d| !d.is_none()) {
        Some(d) => {
            let (device, text) = device(op, d)?;
            (Some(device), Some(text))
        }
        None => (None, None),
    };
    Ok(Call { inputs, spec, device, device_text })
}

fn invalid(op: &str, msg: impl Into<String>) -> PyErr {
    to_py(kiln::Error::invalid(op, msg))
}

fn repr(value: &Bound<'_, PyAny>) -> String {
    value.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<unprintable>".into())
}

/// NumPy's `bool_` type (a bool is not an integer argument).
fn is_numpy_bool(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    static BOOL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = value.py();
    let t = BOOL.get_or_try_init(py, || py.import("numpy")?.getattr("bool_").map(Bound::unbind))?;
    value.is_instance(t.bind(py))
}

fn is_bool(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(value.is_instance_of::<PyBool>() || is_numpy_bool(value)?)
}

/// `value` as an integer when it is one (`operator.index`, not a bool), else `None`; an integer
/// past `i128` is `i128::MAX`.
fn integer(value: &Bound<'_, PyAny>) -> PyResult<Option<i128>> {
    // An integer past i128 is past every range an argument allows.
    if value.is_exact_instance_of::<PyInt>() {
        if let Ok(small) = value.extract::<i64>() {
            return Ok(Some(small.into()));
        }
        return Ok(Some(value.extract::<i128>().unwrap_or(i128::MAX)));
    }
    if is_bool(value)? || value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyString>() {
        return Ok(None);
    }
    // Other integers (NumPy's, subclasses of int) through `__index__`.
    match value.extract::<i128>() {
        Ok(i) => Ok(Some(i)),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => Ok(Some(i128::MAX)),
        Err(_) => Ok(None),
    }
}

/// `list(value)` for an iterable that is not a string.
pub fn sequence<'py>(op: &str, what: &str, value: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = value.cast::<PyList>() {
        return Ok(list.iter().collect());
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return Ok(tuple.iter().collect());
    }
    let refused = value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>();
    match (!refused).then(|| value.try_iter()).and_then(Result::ok) {
        Some(items) => items.collect(),
        None => Err(invalid(op, format!("{what} must be a list, got {}", repr(value)))),
    }
}

/// The items of an iterable (tuples and lists read directly); `None` when it is not one or its
/// iteration fails.
fn items<'py>(value: &Bound<'py, PyAny>) -> Option<SmallVec<[Bound<'py, PyAny>; 4]>> {
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return Some(tuple.iter().collect());
    }
    if let Ok(list) = value.cast::<PyList>() {
        return Some(list.iter().collect());
    }
    value.try_iter().ok()?.collect::<PyResult<_>>().ok()
}

/// Three non-negative integers below 2^32 (a grid or threadgroup).
fn dims(op: &str, what: &str, value: &Bound<'_, PyAny>) -> PyResult<[u32; 3]> {
    let bad = || invalid(op, format!("{what} must be three integers in [0, 2^32), got {}", repr(value)));
    let items = items(value).ok_or_else(bad)?;
    if items.len() != 3 {
        return Err(bad());
    }
    let mut out = [0u32; 3];
    for (o, v) in out.iter_mut().zip(&items) {
        *o = integer(v)?.and_then(|v| u32::try_from(v).ok()).ok_or_else(bad)?;
    }
    Ok(out)
}

/// A shape: non-negative integers below 2^63 (`what` names the argument in errors).
fn shape(op: &str, what: impl Fn() -> String, value: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let bad = || invalid(op, format!("{} must be a sequence of non-negative integers, got {}", what(), repr(value)));
    let items = items(value).ok_or_else(bad)?;
    let mut out = Vec::with_capacity(items.len());
    for v in &items {
        let n = integer(v)?.filter(|&n| (0..1i128 << 63).contains(&n)).ok_or_else(bad)?;
        out.push(usize::try_from(n).map_err(|_| bad())?);
    }
    Ok(out)
}

/// The package's name of a dtype argument (`kiln._dtypes.dtype_name`: NumPy, ml_dtypes,
/// PyTorch and MLX dtypes, or a name).
fn dtype_of(value: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(name) = value.cast::<PyString>() {
        if let Some(d) = DType::from_name(name.to_str()?) {
            return Ok(d);
        }
    }
    // Dtype objects named before (NumPy's scalar types and dtypes, PyTorch's and MLX's dtypes are
    // singletons), by identity; each is held, so its address is not reused while it is cached.
    static NAMED: Mutex<Vec<(Py<PyAny>, DType)>> = Mutex::new(Vec::new());
    const NAMED_MAX: usize = 64;
    let named = |v: &Bound<'_, PyAny>| {
        NAMED.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(o, _)| v.is(o)).map(|&(_, d)| d)
    };
    if let Some(d) = named(value) {
        return Ok(d);
    }
    static DTYPE_NAME: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = value.py();
    let f = DTYPE_NAME.get_or_try_init(py, || py.import("kiln._dtypes")?.getattr("dtype_name").map(Bound::unbind))?;
    let name = f.bind(py).call1((value,))?;
    let dtype = crate::convert::dtype(name.cast::<PyString>()?.to_str()?)?;
    let mut cache = NAMED.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() < NAMED_MAX && !cache.iter().any(|(o, _)| value.is(o)) {
        cache.push((value.clone().unbind(), dtype));
    }
    Ok(dtype)
}

fn dtype(op: &str, what: impl Fn() -> String, value: &Bound<'_, PyAny>) -> PyResult<DType> {
    dtype_of(value).map_err(|e| named(value.py(), op, &what(), e))
}

/// MLX's template list: `(name, value)` pairs with bool, int (32-bit) or dtype values.
fn template(op: &str, value: &Bound<'_, PyAny>, mut spec: LaunchSpec) -> PyResult<LaunchSpec> {
    if !value.is_truthy()? {
        return Ok(spec);
    }
    for item in sequence(op, "template", value)? {
        let pair = match (item.cast::<PyTuple>(), item.cast::<PyList>()) {
            (Ok(t), _) if t.len() == 2 => Some((t.get_item(0)?, t.get_item(1)?)),
            (_, Ok(l)) if l.len() == 2 => Some((l.get_item(0)?, l.get_item(1)?)),
            _ => None,
        };
        let Some((name_object, v)) = pair.filter(|(n, _)| n.is_instance_of::<PyString>()) else {
            return Err(invalid(op, format!("template entries are (name, value) pairs, got {}", repr(&item))));
        };
        let name: String = name_object.extract()?;
        let quoted = repr(&name_object);
        if !is_identifier(&name) {
            return Err(invalid(op, format!("template name {quoted} is not an identifier")));
        }
        if is_bool(&v)? {
            spec = spec.template(name, v.is_truthy()?);
        } else if let Some(n) = integer(&v)? {
            let Ok(n) = i32::try_from(n) else {
                return Err(invalid(
                    op,
                    format!("template {quoted} = {} does not fit the 32-bit int that template integers are", repr(&v)),
                ));
            };
            spec = spec.template(name, n);
        } else if let Ok(d) = dtype_of(&v) {
            spec = spec.template(name, d);
        } else {
            return Err(invalid(
                op,
                format!("invalid template argument {quoted} = {}; must be Dtype, int or bool", repr(&v)),
            ));
        }
    }
    Ok(spec)
}

/// Python's `str.isidentifier` for the names a template uses.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic()) && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// A number (bool, integer or float), if `value` is one.
fn number(value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if is_bool(value)? {
        return Ok(Some(if value.is_truthy()? { 1.0 } else { 0.0 }));
    }
    if let Some(n) = integer(value)? {
        return Ok(Some(n as f64));
    }
    static FLOATING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = value.py();
    let floating = FLOATING.get_or_try_init(py, || py.import("numpy")?.getattr("floating").map(Bound::unbind))?;
    if value.is_instance_of::<PyFloat>() || value.is_instance(floating.bind(py))? {
        return Ok(Some(value.extract()?));
    }
    Ok(None)
}

fn init_value(op: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if value.is_none() {
        return Ok(None);
    }
    match number(value)? {
        Some(v) => Ok(Some(v)),
        None => Err(invalid(op, format!("init_value must be a number, got {}", repr(value)))),
    }
}

/// A time limit in seconds: a positive, finite number.
fn timeout(op: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
    if value.is_none() {
        return Ok(None);
    }
    let seconds = if is_bool(value)? { None } else { number(value)? };
    match seconds.and_then(|s| Duration::try_from_secs_f64(s).ok()).filter(|d| !d.is_zero()) {
        Some(d) => Ok(Some(d)),
        None => Err(invalid(op, format!("timeout must be a positive number of seconds, got {}", repr(value)))),
    }
}

/// `"cpu"`, `"cuda"` or `"cuda:N"` (a `torch.device` prints as one), and its text.
fn device(op: &str, value: &Bound<'_, PyAny>) -> PyResult<(Device, String)> {
    let text = match value.cast::<PyString>() {
        Ok(s) => s.to_str()?.to_owned(),
        Err(_) => value.str()?.to_string(),
    };
    let (kind, index) = text.split_once(':').map_or((text.as_str(), None), |(k, i)| (k, Some(i)));
    let valid = match (kind, index) {
        ("cpu", None) | ("cuda", None) => true,
        ("cuda", Some(i)) => !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()),
        _ => false,
    };
    let parsed = valid.then(|| text.parse::<Device>().ok()).flatten();
    match parsed {
        Some(d) => Ok((d, text)),
        None => Err(invalid(op, format!("device must be 'cpu', 'cuda' or 'cuda:N', got {}", repr(value)))),
    }
}

/// `error` of a conversion, as the same class with a message naming `op` and `what` (without
/// the `[kiln]` prefix of a context-free conversion).
pub fn named(py: Python<'_>, op: &str, what: &str, error: PyErr) -> PyErr {
    let value = error.value(py);
    let text = value.str().map(|s| s.to_string()).unwrap_or_default();
    let text = text.strip_prefix("[kiln] ").unwrap_or(&text);
    let message = format!("[{op}] {what}: {text}");
    let is_kiln = py
        .import("kiln.errors")
        .and_then(|m| m.getattr("KilnError"))
        .and_then(|c| value.is_instance(&c))
        .unwrap_or(false);
    if !is_kiln {
        return error;
    }
    match value.get_type().call1((message,)) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// The package's Python glue for objects the extension does not read itself (lists, DLPack and
/// CUDA-array-interface exports): `kiln._arrays.as_array`, which gives a NumPy array or a
/// PyTorch tensor over the same data.
fn as_array<'py>(x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static AS_ARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = x.py();
    let f = AS_ARRAY.get_or_try_init(py, || py.import("kiln._arrays")?.getattr("as_array").map(Bound::unbind))?;
    f.bind(py).call1((x,))
}

/// `kiln._kiln.read_inputs(op, names, arrays, ensure_row_contiguous)`: arrays (and scalars) as
/// the extension's calls take them, read as a kernel call reads its inputs (errors name `op` and
/// `names[k]`): `(values, framework, ordinal, lead_tensor)`, the values `LentArray`s and Python
/// scalars, the framework (`"numpy"` or `"torch"`) and CUDA device ordinal (-1: host) of the
/// lead array, and the lead tensor itself when it is a PyTorch tensor.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn read_inputs<'py>(
    py: Python<'py>,
    op: &str,
    names: Vec<String>,
    arrays: &Bound<'py, PyAny>,
    ensure_row_contiguous: bool,
) -> PyResult<(Vec<Py<PyAny>>, &'static str, i64, Option<Bound<'py, PyAny>>)> {
    let read = inputs(op, &names, ensure_row_contiguous, arrays)?;
    let lead = read.lead();
    let mut values = Vec::with_capacity(read.values.len());
    for v in read.values {
        values.push(match v {
            KernelInput::Array(a) => Py::new(py, lent::LentArray::new(a))?.into_any(),
            KernelInput::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
            KernelInput::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
            KernelInput::Float(f) => f.into_pyobject(py)?.into_any().unbind(),
        });
    }
    let (framework, ordinal) = match lead {
        Lead::NumPy => ("numpy", -1),
        Lead::Torch(o) => ("torch", o),
    };
    Ok((values, framework, ordinal, read.lead_tensor))
}

/// A call's `inputs`, each read once; an error names the input.
fn inputs<'py>(
    op: &str,
    names: &[String],
    ensure_row_contiguous: bool,
    value: &Bound<'py, PyAny>,
) -> PyResult<Inputs<'py>> {
    let refused = value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>();
    if refused || value.try_iter().is_err() {
        return Err(invalid(op, format!("inputs must be a list, got {}", repr(value))));
    }
    let mut out = Inputs { values: Vec::new(), lead: None, lead_tensor: None };
    for (k, x) in sequence(op, "inputs", value)?.iter().enumerate() {
        let read = input(x, ensure_row_contiguous, &mut out);
        let input = read.map_err(|e| {
            let what = match names.get(k) {
                Some(n) => format!("inputs[{k}] ({n})"),
                None => format!("inputs[{k}]"),
            };
            named(x.py(), op, &what, e)
        })?;
        out.values.push(input);
    }
    Ok(out)
}

/// One input: Python scalars by MLX's rules, arrays of every framework read in place.
fn input<'py>(x: &Bound<'py, PyAny>, ensure_row_contiguous: bool, out: &mut Inputs<'py>) -> PyResult<KernelInput> {
    let py = x.py();
    // Python's own scalars first: NumPy's float64 is also a float, and keeps its dtype below.
    let python_scalar =
        x.is_exact_instance_of::<PyBool>() || x.is_exact_instance_of::<PyInt>() || x.is_exact_instance_of::<PyFloat>();
    if let Some(scalar) = python_scalar.then(|| convert::scalar(x)).flatten() {
        return scalar;
    }
    let array = if crate::numpy_api::is_array(x) {
        lent::read(x)?
    } else if let Ok(lent) = x.cast::<lent::LentArray>() {
        // Memory the package read already (an MLX array's DLPack export).
        lent.get().array().clone()
    } else if let Some(t) = tensor(x)? {
        return tensor_input(&t, ensure_row_contiguous, out);
    } else if lent::is_numpy_scalar(x)? {
        // NumPy scalars keep their dtype (np.float64 is also a Python float).
        lent::read(&py.import(intern!(py, "numpy"))?.getattr(intern!(py, "asarray"))?.call1((x,))?)?
    } else if let Some(scalar) = convert::scalar(x) {
        return scalar;
    } else {
        let a = as_array(x)?;
        if let Some(t) = tensor(&a)? {
            return tensor_input(&t, ensure_row_contiguous, out);
        }
        lent::read(&a)?
    };
    out.offer_lead(&array, Lead::NumPy, None);
    Ok(KernelInput::Array(array))
}

/// `x` if it is a PyTorch tensor.
fn tensor<'py>(x: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = x.py();
    match torch_call::torch(py) {
        Some(torch) if x.is_instance(torch.tensor_type(py))? => Ok(Some(x.clone())),
        _ => Ok(None),
    }
}

/// A PyTorch tensor input: on the CPU or a CUDA device (a strided CUDA tensor made contiguous
/// by PyTorch, on its current stream, where MLX would copy it).
fn tensor_input<'py>(
    t: &Bound<'py, PyAny>,
    ensure_row_contiguous: bool,
    out: &mut Inputs<'py>,
) -> PyResult<KernelInput> {
    let py = t.py();
    let ordinal: i64 = t.call_method0(intern!(py, "get_device"))?.extract()?;
    let device = t.getattr(intern!(py, "device"))?;
    if ordinal < 0 && device.getattr(intern!(py, "type"))?.str()?.to_str()? != "cpu" {
        return Err(to_py(kiln::Error::invalid(
            "kiln",
            format!("tensors on {} are not supported (cpu or cuda)", device.str()?),
        )));
    }
    let mut t = t.clone();
    if ordinal >= 0 && ensure_row_contiguous && !t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()? {
        t = t.call_method0(intern!(py, "contiguous"))?;
    }
    let Some(torch) = torch_call::torch(py) else {
        return Err(PyTypeError::new_err("[kiln] PyTorch is not imported"));
    };
    let (array, _, _) = torch_call::read_tensor(&t, torch)?;
    out.offer_lead(&array, Lead::Torch(ordinal), Some(&t));
    Ok(KernelInput::Array(array))
}
