//! The key cache: one Python string per distinct dict key, shared by every
//! object the watch decoder builds (orjson keeps such a cache too). It only
//! grows, to a bound; a key past it is made afresh each time.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use pyo3::prelude::*;
use pyo3::types::PyString;

/// Keys this many bytes long or shorter are shared (orjson's key cache has the same bound).
pub(super) const KEY_CACHE_LEN: usize = 64;
/// At most this many distinct keys are shared; later ones are made afresh.
const KEY_CACHE_SIZE: usize = 4096;

static KEYS: OnceLock<Mutex<HashMap<Box<str>, Py<PyString>>>> = OnceLock::new();

/// A dict key as one shared string per distinct key, as orjson's key cache gives: every
/// kept pod's keys (`name`, `labels`, `cpu`, its label keys) would otherwise be strings of
/// their own, hashed at each insertion (20 MiB more peak RSS at 5,000 pods).
pub(super) fn key<'py>(py: Python<'py>, k: &str) -> Bound<'py, PyString> {
    if k.len() > KEY_CACHE_LEN {
        return PyString::new(py, k);
    }
    let mut keys = KEYS.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = keys.get(k) {
        return shared.bind(py).clone();
    }
    let fresh = PyString::new(py, k);
    if keys.len() < KEY_CACHE_SIZE {
        keys.insert(k.into(), fresh.clone().unbind());
    }
    fresh
}
