//! Typed access to a parsed spec file with errors that name the file and the dotted key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::{Table, Value};

use kiln::dtype::DType;
use kiln::error::Error;

/// A table of the spec file together with its dotted location, for precise errors.
pub(crate) struct Section<'a> {
    pub file: &'a Path,
    pub path: String,
    pub table: &'a Table,
}

impl<'a> Section<'a> {
    pub fn new(file: &'a Path, path: impl Into<String>, table: &'a Table) -> Self {
        Section { file, path: path.into(), table }
    }

    pub fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub fn err(&self, key: &str, msg: impl Into<String>) -> Error {
        spec_err(self.file, self.key_path(key), msg)
    }

    /// Fails on any key not in `allowed`.
    pub fn only_keys(&self, allowed: &[&str]) -> Result<(), Error> {
        for key in self.table.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(self.err(key, format!("unknown key (expected one of: {})", allowed.join(", "))));
            }
        }
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.table.get(key)
    }

    pub fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    pub fn require(&self, key: &str) -> Result<&'a Value, Error> {
        self.get(key).ok_or_else(|| self.err(key, "missing required key"))
    }

    pub fn str(&self, key: &str) -> Result<Option<&'a str>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.err(key, format!("expected a string, found {}", v.type_str()))),
        }
    }

    pub fn req_str(&self, key: &str) -> Result<&'a str, Error> {
        self.str(key)?.ok_or_else(|| self.err(key, "missing required key"))
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(key, format!("expected a boolean, found {}", v.type_str()))),
        }
    }

    /// A number given as integer or float.
    pub fn number(&self, key: &str) -> Result<Option<f64>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Integer(i)) => Ok(Some(*i as f64)),
            Some(Value::Float(f)) => Ok(Some(*f)),
            Some(v) => Err(self.err(key, format!("expected a number, found {}", v.type_str()))),
        }
    }

    /// A duration in seconds (integer or float, at least 0; 0 means no limit).
    pub fn seconds(&self, key: &str) -> Result<Option<Duration>, Error> {
        let Some(secs) = self.number(key)? else { return Ok(None) };
        if secs.is_nan() || secs < 0.0 {
            return Err(self.err(key, format!("{secs} is not a number of seconds (give one >= 0; 0 means no limit)")));
        }
        Duration::try_from_secs_f64(secs)
            .map(Some)
            .map_err(|_| self.err(key, format!("{secs} seconds is too long (give 0 for no limit)")))
    }

    pub fn strings(&self, key: &str) -> Result<Vec<String>, Error> {
        let arr = self.array(key)?;
        arr.iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(self.err(&format!("{key}[{i}]"), format!("expected a string, found {}", v.type_str()))),
            })
            .collect()
    }

    pub fn array(&self, key: &str) -> Result<&'a Vec<Value>, Error> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(self.err(key, format!("expected an array, found {}", v.type_str()))),
        }
    }

    /// A list of non-negative integers (a shape or a permutation).
    pub fn usizes(&self, key: &str) -> Result<Vec<usize>, Error> {
        usize_list(self.file, &self.key_path(key), self.require(key)?)
    }

    /// Exactly three positive 32-bit counts (grid, threadgroup).
    pub fn dims3(&self, key: &str) -> Result<[u32; 3], Error> {
        let v = self.usizes(key)?;
        if v.len() != 3 {
            return Err(self.err(key, format!("expected 3 values, found {}", v.len())));
        }
        let mut out = [0u32; 3];
        for (o, n) in out.iter_mut().zip(&v) {
            *o = u32::try_from(*n).map_err(|_| self.err(key, format!("{n} does not fit in 32 bits")))?;
        }
        Ok(out)
    }

    pub fn dtype(&self, key: &str) -> Result<Option<DType>, Error> {
        match self.str(key)? {
            None => Ok(None),
            Some(name) => DType::from_name(name).map(Some).ok_or_else(|| self.err(key, unknown_dtype(name))),
        }
    }

    pub fn sub_table(&self, key: &str) -> Result<Option<Section<'a>>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(Section::new(self.file, self.key_path(key), t))),
            Some(v) => Err(self.err(key, format!("expected a table, found {}", v.type_str()))),
        }
    }

    /// The tables of an array of tables (`[[input]]`), each with its indexed path.
    pub fn tables(&self, key: &str) -> Result<Vec<Section<'a>>, Error> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::Table(t) => Ok(Section::new(self.file, format!("{}[{i}]", self.key_path(key)), t)),
                    v => Err(self.err(key, format!("expected tables ([[{key}]]), found {}", v.type_str()))),
                })
                .collect(),
            Some(v) => Err(self.err(key, format!("expected an array of tables ([[{key}]]), found {}", v.type_str()))),
        }
    }
}

pub(crate) fn spec_err(file: &Path, key: impl Into<String>, msg: impl Into<String>) -> Error {
    Error::Spec { file: PathBuf::from(file), key: key.into(), msg: msg.into() }
}

pub(crate) fn unknown_dtype(name: &str) -> String {
    let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
    format!("unknown dtype {name:?} (expected one of: {})", names.join(", "))
}

pub(crate) fn usize_list(file: &Path, key: &str, v: &Value) -> Result<Vec<usize>, Error> {
    let Value::Array(items) = v else {
        return Err(spec_err(file, key, format!("expected an array of integers, found {}", v.type_str())));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Integer(n) if *n >= 0 => Ok(*n as usize),
            Value::Integer(n) => Err(spec_err(file, format!("{key}[{i}]"), format!("{n} is negative"))),
            v => Err(spec_err(file, format!("{key}[{i}]"), format!("expected an integer, found {}", v.type_str()))),
        })
        .collect()
}
