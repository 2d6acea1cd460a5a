//! A pod watch event, decoded straight into the projection ksched keeps.
//!
//! The pod informer receives every pod's every change (created, bound, its
//! status written by the kubelet): about three 4 KB events per pod, most of
//! each one `managedFields`, container statuses and volumes ksched never
//! reads. Parsed whole with orjson and then projected (`loop/mirror/slim.py`'s
//! `slim_pod`), one event cost about 20 us of the GIL; here the event is read
//! in one pass that builds Python objects only for the fields `slim_pod`
//! keeps and skips the rest unbuilt. The result equals `slim_pod` of the
//! parsed object, key order included (`tests/unit/test_watch_decode.py` holds
//! the two together); a value that is not an object where one is expected
//! reads as an empty object, as `slim_pod`'s `x.get(...) or {}` does. How a
//! JSON object's fields are read, and which ones each part keeps, is plain
//! Rust in `ksched_wire::projection`; this module builds the Python objects,
//! one string per distinct dict key (`watch/intern.rs`) and one object per
//! distinct kept value (`watch/tree.rs`) for all the pods the informer holds.

mod intern;
mod tree;

use std::fmt;

use ksched_wire::projection::{
    kept_annotation, skip, Fields, Key, List, Object, CONDITION, CONTAINER, CONTAINER_STATUS, POD_CONDITIONS, POD_META, POD_SPEC,
    STATUS_ERROR, STATUS_KEPT,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use intern::key;
use tree::Shared;

/// One decoded event: its type, the object's `metadata.resourceVersion`, the
/// projection of the object, and the object's `code`, `reason` and `message`
/// (what an ERROR event's Status says).
pub struct Event<'py> {
    pub kind: Option<Bound<'py, PyAny>>,
    pub version: Option<Bound<'py, PyAny>>,
    pub slim: Bound<'py, PyDict>,
    pub error: Bound<'py, PyDict>,
}

/// Decode one line of a pod watch.
pub fn decode_pod_event<'py>(py: Python<'py>, line: &[u8]) -> Result<Event<'py>, String> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let event = Object(EventFields::new(py)).deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    finish(py, event.ok_or("a watch event is a JSON object")?)
}

/// Decode one frame of a protobuf pod watch (`watch_proto`) into the same projection.
pub fn decode_pod_frame<'py>(py: Python<'py>, frame: &[u8]) -> Result<Event<'py>, String> {
    let value = ksched_wire::watch_proto::event_value(frame)?;
    let event = Object(EventFields::new(py)).deserialize(value).map_err(|e| e.to_string())?;
    finish(py, event.ok_or("a watch event is an object")?)
}

/// One page of a pod list: each item's projection (as `decode_pod_event` makes it), and the
/// list's `continue` token and resourceVersion where it has them.
pub struct Page<'py> {
    pub items: Bound<'py, PyList>,
    pub next: Option<Bound<'py, PyAny>>,
    pub version: Option<Bound<'py, PyAny>>,
}

/// Decode one page of a JSON pod list (`GET /api/v1/pods`), as the informer's relist reads it.
pub fn decode_pod_list<'py>(py: Python<'py>, body: &[u8]) -> Result<Page<'py>, String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let list = Object(ListFields::new(py)).deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    page(py, list.ok_or("a pod list is a JSON object")?)
}

/// Decode one page of a protobuf pod list (`ksched_wire::watch_proto::list_value`) into the
/// same page as `decode_pod_list` makes of the JSON one.
pub fn decode_pod_list_proto<'py>(py: Python<'py>, body: &[u8]) -> Result<Page<'py>, String> {
    let value = ksched_wire::watch_proto::list_value(body)?;
    let list = Object(ListFields::new(py)).deserialize(value).map_err(|e| e.to_string())?;
    page(py, list.ok_or("a pod list is an object")?)
}

fn page<'py>(py: Python<'py>, list: ListFields<'py>) -> Result<Page<'py>, String> {
    let items = PyList::empty(py);
    for pod in list.items.unwrap_or_default().into_iter().flatten() {
        let (_, slim, _) = pod.finish()?;
        items.append(slim).map_err(|e| e.to_string())?;
    }
    let meta = list.metadata;
    Ok(Page {
        items,
        next: meta.as_ref().and_then(|m| m.get("continue")).cloned(),
        version: meta.as_ref().and_then(|m| m.get("resourceVersion")).cloned(),
    })
}

/// What a list page holds: its metadata's paging fields, and its items.
const LIST_META: &[&str] = &["continue", "resourceVersion"];

struct ListFields<'py> {
    py: Python<'py>,
    metadata: Option<Pick<'py>>,
    items: Option<Vec<Option<PodFields<'py>>>>,
}

impl<'py> ListFields<'py> {
    fn new(py: Python<'py>) -> Self {
        ListFields {
            py,
            metadata: None,
            items: None,
        }
    }
}

impl<'de, 'py> Fields<'de> for ListFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let py = self.py;
        match key {
            "metadata" => self.metadata = map.next_value_seed(Object(Pick::with_own(py, LIST_META, LIST_META)))?,
            "items" => self.items = map.next_value_seed(List(|| PodFields::new(py)))?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

fn finish<'py>(py: Python<'py>, event: EventFields<'py>) -> Result<Event<'py>, String> {
    let (version, slim, error) = event.object.unwrap_or_else(|| PodFields::new(py)).finish()?;
    Ok(Event {
        kind: event.kind,
        version,
        slim,
        error,
    })
}

fn py_err<E: de::Error>(err: PyErr) -> E {
    E::custom(err)
}

/// A pod's own metadata: its name and uid are never shared.
const OWN: &[&str] = &["name", "uid"];

/// Any JSON value as the Python object orjson makes of it.
#[derive(Clone, Copy)]
struct Value<'py>(Python<'py>);

impl<'de, 'py> DeserializeSeed<'de> for Value<'py> {
    type Value = Bound<'py, PyAny>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'py> Visitor<'de> for Value<'py> {
    type Value = Bound<'py, PyAny>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(PyBool::new(self.0, v).to_owned().into_any())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into_pyobject(self.0).unwrap_or_else(|never| match never {}).into_any())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into_pyobject(self.0).unwrap_or_else(|never| match never {}).into_any())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(PyFloat::new(self.0, v).into_any())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(PyString::new(self.0, v).into_any())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.0.None().into_bound(self.0))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let list = PyList::empty(self.0);
        while let Some(item) = seq.next_element_seed(self)? {
            list.append(item).map_err(py_err)?;
        }
        Ok(list.into_any())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let dict = PyDict::new(self.0);
        while let Some(k) = map.next_key_seed(Key)? {
            let value = map.next_value_seed(self)?;
            dict.set_item(key(self.0, &k), value).map_err(py_err)?;
        }
        Ok(dict.into_any())
    }
}

/// `_pick(obj, keys)`: the listed keys present, whole, in the list's order. Each value is
/// `Shared` unless its key is one of `own` (a pod's name and uid, which no other pod has).
struct Pick<'py> {
    py: Python<'py>,
    keys: &'static [&'static str],
    own: &'static [&'static str],
    values: Vec<Option<Bound<'py, PyAny>>>,
}

impl<'py> Pick<'py> {
    fn new(py: Python<'py>, keys: &'static [&'static str]) -> Pick<'py> {
        Pick {
            py,
            keys,
            own: &[],
            values: vec![None; keys.len()],
        }
    }

    /// A pick whose values under `own` are built for this object alone.
    fn with_own(py: Python<'py>, keys: &'static [&'static str], own: &'static [&'static str]) -> Pick<'py> {
        Pick {
            own,
            ..Pick::new(py, keys)
        }
    }

    fn get(&self, key: &str) -> Option<&Bound<'py, PyAny>> {
        self.keys.iter().position(|k| *k == key).and_then(|i| self.values[i].as_ref())
    }

    fn dict(self) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(self.py);
        for (k, value) in self.keys.iter().zip(self.values) {
            if let Some(value) = value {
                dict.set_item(key(self.py, k), value)?;
            }
        }
        Ok(dict)
    }
}

impl<'de> Fields<'de> for Pick<'_> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match self.keys.iter().position(|k| *k == key) {
            Some(i) if self.own.contains(&key) => self.values[i] = Some(map.next_value_seed(Value(self.py))?),
            Some(i) => self.values[i] = Some(map.next_value_seed(Shared(self.py))?),
            None => skip(map)?,
        }
        Ok(())
    }
}

fn picked<'py>(py: Python<'py>, pick: Option<Pick<'py>>) -> PyResult<Bound<'py, PyDict>> {
    pick.map_or_else(|| Ok(PyDict::new(py)), Pick::dict)
}

fn truthy(value: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    value.map_or(Ok(false), |v| v.is_truthy())
}

struct EventFields<'py> {
    py: Python<'py>,
    kind: Option<Bound<'py, PyAny>>,
    object: Option<PodFields<'py>>,
}

impl<'py> EventFields<'py> {
    fn new(py: Python<'py>) -> Self {
        EventFields {
            py,
            kind: None,
            object: None,
        }
    }
}

impl<'de, 'py> Fields<'de> for EventFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = Some(map.next_value_seed(Value(self.py))?),
            "object" => self.object = map.next_value_seed(Object(PodFields::new(self.py)))?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

struct PodFields<'py> {
    py: Python<'py>,
    metadata: Option<MetaFields<'py>>,
    spec: Option<SpecFields<'py>>,
    status: Option<StatusFields<'py>>,
    error: Pick<'py>,
}

type Parts<'py> = (Option<Bound<'py, PyAny>>, Bound<'py, PyDict>, Bound<'py, PyDict>);

impl<'py> PodFields<'py> {
    fn new(py: Python<'py>) -> Self {
        PodFields {
            py,
            metadata: None,
            spec: None,
            status: None,
            error: Pick::new(py, STATUS_ERROR),
        }
    }

    /// The resourceVersion, `slim_pod`'s projection and the Status fields.
    fn finish(self) -> Result<Parts<'py>, String> {
        self.build().map_err(|e| e.to_string())
    }

    fn build(self) -> PyResult<Parts<'py>> {
        let py = self.py;
        let slim = PyDict::new(py);
        let (version, metadata) = match self.metadata {
            Some(m) => (m.version.clone(), m.build()?),
            None => (None, PyDict::new(py)),
        };
        slim.set_item(key(slim.py(), "metadata"), metadata)?;
        slim.set_item(key(slim.py(), "spec"), self.spec.unwrap_or_else(|| SpecFields::new(py)).build()?)?;
        slim.set_item(
            key(slim.py(), "status"),
            self.status.unwrap_or_else(|| StatusFields::new(py)).build()?,
        )?;
        Ok((version, slim, self.error.dict()?))
    }
}

impl<'de, 'py> Fields<'de> for PodFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let py = self.py;
        match key {
            "metadata" => self.metadata = map.next_value_seed(Object(MetaFields::new(py)))?,
            "spec" => self.spec = map.next_value_seed(Object(SpecFields::new(py)))?,
            "status" => self.status = map.next_value_seed(Object(StatusFields::new(py)))?,
            _ => self.error.field(key, map)?,
        }
        Ok(())
    }
}

struct MetaFields<'py> {
    pick: Pick<'py>,
    version: Option<Bound<'py, PyAny>>,
    /// ksched's own annotations (`ksched.io/...`), in their order.
    ours: Vec<(String, Bound<'py, PyAny>)>,
}

impl<'py> MetaFields<'py> {
    fn new(py: Python<'py>) -> Self {
        MetaFields {
            pick: Pick::with_own(py, POD_META, OWN),
            version: None,
            ours: Vec::new(),
        }
    }

    fn build(self) -> PyResult<Bound<'py, PyDict>> {
        let dict = self.pick.dict()?;
        if !self.ours.is_empty() {
            let ours = PyDict::new(dict.py());
            for (name, value) in self.ours {
                ours.set_item(key(dict.py(), &name), value)?;
            }
            dict.set_item(key(dict.py(), "annotations"), ours)?;
        }
        Ok(dict)
    }
}

impl<'de, 'py> Fields<'de> for MetaFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let py = self.pick.py;
        match key {
            "resourceVersion" => self.version = Some(map.next_value_seed(Value(py))?),
            "annotations" => self.ours = map.next_value_seed(Object(Ours(py, Vec::new())))?.map(|o| o.1).unwrap_or_default(),
            _ => self.pick.field(key, map)?,
        }
        Ok(())
    }
}

struct Ours<'py>(Python<'py>, Vec<(String, Bound<'py, PyAny>)>);

impl<'de, 'py> Fields<'de> for Ours<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        if kept_annotation(key) {
            let value = map.next_value_seed(Value(self.0))?;
            // A repeated key keeps its first place and its last value, as a dict does.
            match self.1.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value,
                None => self.1.push((key.to_owned(), value)),
            }
            Ok(())
        } else {
            skip(map)
        }
    }
}

struct SpecFields<'py> {
    pick: Pick<'py>,
    containers: Option<Vec<Option<Pick<'py>>>>,
    init_containers: Option<Vec<Option<Pick<'py>>>>,
    volumes: Option<Vec<Option<VolumeFields<'py>>>>,
}

impl<'py> SpecFields<'py> {
    fn new(py: Python<'py>) -> Self {
        SpecFields {
            pick: Pick::new(py, POD_SPEC),
            containers: None,
            init_containers: None,
            volumes: None,
        }
    }

    fn build(self) -> PyResult<Bound<'py, PyDict>> {
        let py = self.pick.py;
        let dict = self.pick.dict()?;
        let containers = |list: Vec<Option<Pick<'py>>>| -> PyResult<Bound<'py, PyList>> {
            let out = PyList::empty(py);
            for c in list {
                out.append(picked(py, c)?)?;
            }
            Ok(out)
        };
        dict.set_item(key(dict.py(), "containers"), containers(self.containers.unwrap_or_default())?)?;
        if let Some(init) = self.init_containers.filter(|l| !l.is_empty()) {
            dict.set_item(key(dict.py(), "initContainers"), containers(init)?)?;
        }
        let volumes = PyList::empty(py);
        for v in self.volumes.unwrap_or_default().into_iter().flatten() {
            if let Some(kept) = v.build()? {
                volumes.append(kept)?;
            }
        }
        if !volumes.is_empty() {
            dict.set_item(key(dict.py(), "volumes"), volumes)?;
        }
        Ok(dict)
    }
}

impl<'de, 'py> Fields<'de> for SpecFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let py = self.pick.py;
        match key {
            "containers" => self.containers = map.next_value_seed(List(|| Pick::new(py, CONTAINER)))?,
            "initContainers" => self.init_containers = map.next_value_seed(List(|| Pick::new(py, CONTAINER)))?,
            "volumes" => self.volumes = map.next_value_seed(List(|| VolumeFields::new(py)))?,
            _ => self.pick.field(key, map)?,
        }
        Ok(())
    }
}

/// An image volume (ImageLocality) or a volume that uses a claim, with only
/// what names the image or the claim.
struct VolumeFields<'py> {
    py: Python<'py>,
    name: Option<Bound<'py, PyAny>>,
    image: Option<Bound<'py, PyAny>>,
    claim: Option<Bound<'py, PyAny>>,
    ephemeral: bool,
}

impl<'py> VolumeFields<'py> {
    fn new(py: Python<'py>) -> Self {
        VolumeFields {
            py,
            name: None,
            image: None,
            claim: None,
            ephemeral: false,
        }
    }

    fn build(self) -> PyResult<Option<Bound<'py, PyDict>>> {
        let dict = PyDict::new(self.py);
        if truthy(self.image.as_ref())? {
            if let Some(name) = self.name {
                dict.set_item(key(dict.py(), "name"), name)?;
            }
            dict.set_item(key(dict.py(), "image"), self.image)?;
        } else if let Some(claim) = self.claim {
            if let Some(name) = self.name {
                dict.set_item(key(dict.py(), "name"), name)?;
            }
            dict.set_item(key(dict.py(), "persistentVolumeClaim"), claim)?;
        } else if self.ephemeral {
            dict.set_item(key(dict.py(), "name"), self.name)?;
            dict.set_item(key(dict.py(), "ephemeral"), PyDict::new(self.py))?;
        } else {
            return Ok(None);
        }
        Ok(Some(dict))
    }
}

impl<'de, 'py> Fields<'de> for VolumeFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let value = Value(self.py);
        match key {
            "name" => self.name = Some(map.next_value_seed(value)?),
            "image" => self.image = Some(map.next_value_seed(value)?),
            "persistentVolumeClaim" => self.claim = Some(map.next_value_seed(value)?),
            "ephemeral" => {
                self.ephemeral = true;
                skip(map)?;
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

struct StatusFields<'py> {
    pick: Pick<'py>,
    conditions: Option<Vec<Option<Pick<'py>>>>,
    container_statuses: Option<Vec<Option<Pick<'py>>>>,
    init_container_statuses: Option<Vec<Option<Pick<'py>>>>,
}

/// The status fields `slim_pod` keeps whole, in its order (each where truthy, `phase` always).
impl<'py> StatusFields<'py> {
    fn new(py: Python<'py>) -> Self {
        StatusFields {
            pick: Pick::new(py, STATUS_KEPT),
            conditions: None,
            container_statuses: None,
            init_container_statuses: None,
        }
    }

    fn build(self) -> PyResult<Bound<'py, PyDict>> {
        let py = self.pick.py;
        let dict = PyDict::new(py);
        dict.set_item(key(dict.py(), "phase"), self.pick.get("phase"))?;
        let conditions = PyList::empty(py);
        for c in self.conditions.unwrap_or_default().into_iter().flatten() {
            let wanted = match c.get("type") {
                Some(t) => POD_CONDITIONS
                    .iter()
                    .try_fold(false, |found, name| Ok::<_, PyErr>(found || t.eq(*name)?))?,
                None => false,
            };
            if wanted {
                conditions.append(c.dict()?)?;
            }
        }
        if !conditions.is_empty() {
            dict.set_item(key(dict.py(), "conditions"), conditions)?;
        }
        for (field, statuses) in [
            ("containerStatuses", self.container_statuses),
            ("initContainerStatuses", self.init_container_statuses),
        ] {
            let resized = PyList::empty(py);
            for cs in statuses.unwrap_or_default().into_iter().flatten() {
                if truthy(cs.get("allocatedResources"))? || truthy(cs.get("resources"))? {
                    resized.append(cs.dict()?)?;
                }
            }
            if !resized.is_empty() {
                dict.set_item(key(py, field), resized)?;
            }
        }
        for field in &STATUS_KEPT[1..] {
            if let Some(value) = self.pick.get(field).filter(|v| v.is_truthy().unwrap_or(false)) {
                dict.set_item(key(py, field), value)?;
            }
        }
        Ok(dict)
    }
}

impl<'de, 'py> Fields<'de> for StatusFields<'py> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let py = self.pick.py;
        match key {
            "conditions" => self.conditions = map.next_value_seed(List(|| Pick::new(py, CONDITION)))?,
            "containerStatuses" => self.container_statuses = map.next_value_seed(List(|| Pick::new(py, CONTAINER_STATUS)))?,
            "initContainerStatuses" => self.init_container_statuses = map.next_value_seed(List(|| Pick::new(py, CONTAINER_STATUS)))?,
            _ => self.pick.field(key, map)?,
        }
        Ok(())
    }
}
