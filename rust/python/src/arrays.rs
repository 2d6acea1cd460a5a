//! A dict of numpy arrays, borrowed once and viewed by name.
//!
//! Every 1-D array of an input dict is borrowed read-only when the dict is
//! read, keyed by its name and dtype; the engine views are then built field
//! by field with `slice`, so each array is named exactly once in the binding
//! (where its engine field is filled) and a missing or mistyped array is an
//! error that names it.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use numpy::{Element, PyArray1, PyArrayDescrMethods, PyArrayMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One borrowed array, by dtype.
pub(crate) enum Borrowed<'py> {
    I64(PyReadonlyArray1<'py, i64>),
    I32(PyReadonlyArray1<'py, i32>),
    U64(PyReadonlyArray1<'py, u64>),
    U8(PyReadonlyArray1<'py, u8>),
    F64(PyReadonlyArray1<'py, f64>),
}

impl Borrowed<'_> {
    fn dtype(&self) -> &'static str {
        match self {
            Borrowed::I64(_) => "int64",
            Borrowed::I32(_) => "int32",
            Borrowed::U64(_) => "uint64",
            Borrowed::U8(_) => "uint8",
            Borrowed::F64(_) => "float64",
        }
    }
}

/// The element types the engine's tables use.
pub(crate) trait Column: Element + Sized {
    const DTYPE: &'static str;
    fn view<'a, 'py>(b: &'a Borrowed<'py>) -> Option<&'a PyReadonlyArray1<'py, Self>>;
}

macro_rules! column {
    ($t:ty, $variant:ident, $name:literal) => {
        impl Column for $t {
            const DTYPE: &'static str = $name;
            fn view<'a, 'py>(b: &'a Borrowed<'py>) -> Option<&'a PyReadonlyArray1<'py, Self>> {
                match b {
                    Borrowed::$variant(a) => Some(a),
                    _ => None,
                }
            }
        }
    };
}
column!(i64, I64, "int64");
column!(i32, I32, "int32");
column!(u64, U64, "uint64");
column!(u8, U8, "uint8");
column!(f64, F64, "float64");

fn borrow<'py>(key: &str, item: &Bound<'py, PyAny>) -> PyResult<Borrowed<'py>> {
    fn typed<'py, T: Element>(key: &str, item: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, T>> {
        let a = item
            .cast::<PyArray1<T>>()
            .map_err(|_| PyTypeError::new_err(format!("array {key:?} must be one-dimensional")))?;
        a.try_readonly()
            .map_err(|e| PyTypeError::new_err(format!("array {key:?} cannot be borrowed: {e}")))
    }
    let dtype = item.cast::<PyUntypedArray>()?.dtype();
    let py = item.py();
    Ok(if dtype.is_equiv_to(&numpy::dtype::<i64>(py)) {
        Borrowed::I64(typed(key, item)?)
    } else if dtype.is_equiv_to(&numpy::dtype::<i32>(py)) {
        Borrowed::I32(typed(key, item)?)
    } else if dtype.is_equiv_to(&numpy::dtype::<u64>(py)) {
        Borrowed::U64(typed(key, item)?)
    } else if dtype.is_equiv_to(&numpy::dtype::<u8>(py)) {
        Borrowed::U8(typed(key, item)?)
    } else if dtype.is_equiv_to(&numpy::dtype::<f64>(py)) {
        Borrowed::F64(typed(key, item)?)
    } else {
        return Err(PyTypeError::new_err(format!("array {key:?} has unsupported dtype {dtype}")));
    })
}

/// The arrays and scalars of one input dict (`what` names it in errors).
pub struct Arrays<'py> {
    what: &'static str,
    dict: Bound<'py, PyDict>,
    arrays: HashMap<String, Borrowed<'py>>,
    /// The arrays viewed so far (see `all_viewed`).
    viewed: RefCell<HashSet<String>>,
}

impl<'py> Arrays<'py> {
    pub fn new(what: &'static str, dict: &Bound<'py, PyDict>) -> PyResult<Arrays<'py>> {
        let mut arrays = HashMap::new();
        for (key, item) in dict.iter() {
            if item.is_instance_of::<PyUntypedArray>() {
                let key: String = key.extract()?;
                let borrowed = borrow(&key, &item)?;
                arrays.insert(key, borrowed);
            }
        }
        Ok(Arrays {
            what,
            dict: dict.clone(),
            arrays,
            viewed: RefCell::new(HashSet::new()),
        })
    }

    /// An error naming any array of the dict that no engine field took: the
    /// caller and the binding disagree about the table's shape.
    pub fn all_viewed(&self) -> PyResult<()> {
        let viewed = self.viewed.borrow();
        let mut unused: Vec<&str> = self.arrays.keys().map(String::as_str).filter(|k| !viewed.contains(*k)).collect();
        if unused.is_empty() {
            return Ok(());
        }
        unused.sort_unstable();
        Err(PyKeyError::new_err(format!("{}: unexpected arrays {unused:?}", self.what)))
    }

    /// The nested dict `key` (None where it is absent or None).
    pub fn nested(&self, what: &'static str, key: &str) -> PyResult<Option<Arrays<'py>>> {
        match self.dict.get_item(key)? {
            Some(item) if !item.is_none() => {
                let dict = item
                    .cast_into::<PyDict>()
                    .map_err(|_| PyTypeError::new_err(format!("{}[{key:?}] must be a dict", self.what)))?;
                Ok(Some(Arrays::new(what, &dict)?))
            }
            _ => Ok(None),
        }
    }

    /// View the array `key` as a slice of `T`.
    pub fn slice<T: Column>(&self, key: &str) -> PyResult<&[T]> {
        let what = self.what;
        let borrowed = self
            .arrays
            .get(key)
            .ok_or_else(|| PyKeyError::new_err(format!("{what}: missing array {key:?}")))?;
        self.viewed.borrow_mut().insert(key.to_owned());
        let array = T::view(borrowed)
            .ok_or_else(|| PyTypeError::new_err(format!("{what}: array {key:?} must be {}, got {}", T::DTYPE, borrowed.dtype())))?;
        array
            .as_slice()
            .map_err(|_| PyTypeError::new_err(format!("{what}: array {key:?} must be C-contiguous")))
    }

    /// The scalar (or tuple) `key`.
    pub fn value<T: FromPyObjectOwned<'py>>(&self, key: &str) -> PyResult<T> {
        value(self.what, &self.dict, key)
    }
}

/// `dict[key]` converted to `T`; errors name the dict and the key.
pub fn value<'py, T: FromPyObjectOwned<'py>>(what: &str, dict: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    let item = dict
        .get_item(key)?
        .ok_or_else(|| PyKeyError::new_err(format!("{what}: missing key {key:?}")))?;
    item.extract::<T>()
        .map_err(|e| PyTypeError::new_err(format!("{what}[{key:?}]: {}", Into::<PyErr>::into(e))))
}
