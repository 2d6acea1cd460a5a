//! Engine errors as specific Python exceptions.

use ksched_core::EngineError;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

create_exception!(
    _core,
    EngineInputError,
    PyValueError,
    "The arrays handed to the engine are inconsistent (a caller bug, never a property of the cluster)."
);

pub fn to_py(err: EngineError) -> PyErr {
    EngineInputError::new_err(err.to_string())
}
