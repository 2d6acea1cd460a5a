//! The value cache: a kept value (a label set, an owner reference, a
//! container's resources) is read whole into a `Tree`, looked up by its
//! encoding, and built as a Python object only the first time; every pod with
//! an equal value then holds the same object. The cache is bounded and starts
//! afresh when full.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

use ksched_wire::projection::Key;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::intern::{key, KEY_CACHE_LEN};

/// A kept value is shared when it encodes in at most this many bytes (a label set, an
/// owner reference, a container's resources, an affinity), or a string of at most
/// `KEY_CACHE_LEN` bytes.
const SHARED_VALUE_LEN: usize = 4096;
/// Distinct values shared at most; the cache starts afresh when it holds this many.
const SHARED_SIZE: usize = 1 << 16;

static SHARED: OnceLock<Mutex<HashMap<Vec<u8>, Py<PyAny>>>> = OnceLock::new();

/// A kept value (a string, a label set, an owner reference, a container's resources) as one
/// Python object for every pod that has it equal, key order included. The pods of a
/// ReplicaSet have the same namespace, labels, owner, containers and node names over again:
/// built per pod, the pod informer held about 4.4 KiB a pod; shared, 1.4 KiB (150,000 pods:
/// 640 MiB against 210). The informer's objects are read, never changed, so sharing is safe;
/// a value that does not fit the cache's bounds is built afresh.
#[derive(Clone, Copy)]
pub(super) struct Shared<'py>(pub(super) Python<'py>);

impl<'de, 'py> DeserializeSeed<'de> for Shared<'py> {
    type Value = Bound<'py, PyAny>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let tree = Tree::deserialize(d)?;
        let mut encoded = Vec::new();
        tree.encode(&mut encoded);
        // A string encodes as a tag, its length and its bytes.
        let bound = if matches!(tree, Tree::Str(_)) {
            9 + KEY_CACHE_LEN
        } else {
            SHARED_VALUE_LEN
        };
        if encoded.len() > bound {
            return tree.build(self.0).map_err(de::Error::custom);
        }
        let cache = SHARED.get_or_init(Default::default);
        if let Some(value) = cache.lock().unwrap_or_else(PoisonError::into_inner).get(&encoded) {
            return Ok(value.bind(self.0).clone());
        }
        // Built, and a full cache's values dropped, with the lock released: allocating Python
        // objects can run the garbage collector, and with it any finalizer, which may let
        // another thread decode meanwhile.
        let value = tree.build(self.0).map_err(de::Error::custom)?;
        let dropped = {
            let mut shared = cache.lock().unwrap_or_else(PoisonError::into_inner);
            let dropped = if shared.len() >= SHARED_SIZE {
                std::mem::take(&mut *shared)
            } else {
                HashMap::new()
            };
            shared.insert(encoded, value.clone().unbind());
            dropped
        };
        drop(dropped);
        Ok(value)
    }
}

/// A JSON value read whole in Rust first, so that it can be looked up before any Python
/// object is built. Maps keep their order and repeated keys (the dict built from them keeps
/// the first place and the last value, as orjson's does).
enum Tree {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
    List(Vec<Tree>),
    Map(Vec<(String, Tree)>),
}

impl Tree {
    /// A byte string that two trees share exactly when they build equal objects of equal
    /// types in equal key order.
    fn encode(&self, out: &mut Vec<u8>) {
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(b);
        }
        match self {
            Tree::Null => out.push(b'n'),
            Tree::Bool(v) => out.push(if *v { b't' } else { b'f' }),
            Tree::Int(v) => {
                out.push(b'i');
                out.extend_from_slice(&v.to_le_bytes());
            }
            Tree::Uint(v) => {
                out.push(b'u');
                out.extend_from_slice(&v.to_le_bytes());
            }
            Tree::Float(v) => {
                out.push(b'd');
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            Tree::Str(v) => {
                out.push(b's');
                bytes(out, v.as_bytes());
            }
            Tree::List(items) => {
                out.push(b'[');
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for item in items {
                    item.encode(out);
                }
            }
            Tree::Map(fields) => {
                out.push(b'{');
                out.extend_from_slice(&(fields.len() as u64).to_le_bytes());
                for (k, v) in fields {
                    bytes(out, k.as_bytes());
                    v.encode(out);
                }
            }
        }
    }

    /// The Python object orjson makes of the value.
    fn build<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Tree::Null => py.None().into_bound(py),
            Tree::Bool(v) => PyBool::new(py, *v).to_owned().into_any(),
            Tree::Int(v) => v.into_pyobject(py)?.into_any(),
            Tree::Uint(v) => v.into_pyobject(py)?.into_any(),
            Tree::Float(v) => PyFloat::new(py, *v).into_any(),
            Tree::Str(v) => PyString::new(py, v).into_any(),
            Tree::List(items) => {
                let list = PyList::empty(py);
                for item in items {
                    list.append(item.build(py)?)?;
                }
                list.into_any()
            }
            Tree::Map(fields) => {
                let dict = PyDict::new(py);
                for (k, v) in fields {
                    dict.set_item(key(py, k), v.build(py)?)?;
                }
                dict.into_any()
            }
        })
    }
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Tree, E> {
        Ok(Tree::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tree, E> {
        Ok(Tree::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tree, E> {
        Ok(Tree::Uint(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tree, E> {
        Ok(Tree::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tree, E> {
        Ok(Tree::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Tree, E> {
        Ok(Tree::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Tree, E> {
        Ok(Tree::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Tree>()? {
            items.push(item);
        }
        Ok(Tree::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
        let mut fields = Vec::new();
        while let Some(k) = map.next_key_seed(Key)? {
            let value = map.next_value::<Tree>()?;
            fields.push((k.into_owned(), value));
        }
        Ok(Tree::Map(fields))
    }
}
