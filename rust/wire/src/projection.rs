//! Reading the fields of JSON objects that a projection keeps, and skipping the
//! rest unbuilt: the `Fields` a projection implements per object, `Object` and
//! `List` to read them through serde (from a JSON line, or from the protobuf
//! decoder's value, `watch_proto::V`), with Python's reading of values that are
//! not objects, and the lists of keys ksched's pod projection keeps. Building
//! the kept values is the caller's (the binding builds Python objects).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

// What a pod's projection keeps, by part (exported as `_core.POD_PROJECTION`; `loop/mirror/slim.py`
// reads its lists from there).
pub const POD_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",
];
pub const POD_SPEC: &[&str] = &[
    "nodeName",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "overhead",
    "resources",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulingGates",
    "resourceClaims",
];
/// PodScheduled (the scheduler's own verdict), PodResizePending (an infeasible resize),
/// DisruptionTarget (a victim of preemption: upstream `podTerminatingByPreemption`) and
/// ksched.io/HandedOver (a sharded replica's hand-over: its nomination holds no room).
pub const POD_CONDITIONS: &[&str] = &["PodScheduled", "PodResizePending", "DisruptionTarget", "ksched.io/HandedOver"];
pub const CONTAINER: &[&str] = &["name", "image", "resources", "ports", "restartPolicy"];
/// A condition's `lastTransitionTime` is PodScheduled's bind time (the load estimate).
pub const CONDITION: &[&str] = &["type", "status", "lastTransitionTime", "reason", "message"];
pub const CONTAINER_STATUS: &[&str] = &["name", "allocatedResources", "resources"];
pub const STATUS_ERROR: &[&str] = &["code", "reason", "message"];
/// The prefix of the annotations ksched reads (its own).
pub const OURS: &str = "ksched.io/";
/// The annotation of the bookmark that ends a streamed list's initial events (KEP-3157).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether a projection keeps annotation `key`: ksched's own, and the end of a streamed
/// list's initial events.
pub fn kept_annotation(key: &str) -> bool {
    key.starts_with(OURS) || key == INITIAL_EVENTS_END
}
/// What a pod's status keeps besides its conditions and container statuses.
pub const STATUS_KEPT: &[&str] = &["phase", "resources", "allocatedResources", "nominatedNodeName", "startTime"];

/// A JSON key, borrowed from the input where it has no escapes.
pub struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// The fields of a JSON object that a projection reads; every value it does
/// not read is skipped unbuilt.
pub trait Fields<'de>: Sized {
    /// Read (or skip) the value of `key`.
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Visitor methods for scalars that read as None (what is not an object or a list).
macro_rules! none_for {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> Result<Self::Value, E> {
            Ok(None)
        })*
    };
}

/// Booleans, numbers and null read as None.
macro_rules! none_for_numbers {
    () => {
        none_for!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64);
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    };
}

/// A JSON object read through its `Fields`; any other value is skipped and reads as None.
pub struct Object<F>(pub F);

impl<'de, F: Fields<'de>> DeserializeSeed<'de> for Object<F> {
    type Value = Option<F>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: Fields<'de>> Visitor<'de> for Object<F> {
    type Value = Option<F>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        while let Some(key) = map.next_key_seed(Key)? {
            self.0.field(&key, &mut map)?;
        }
        Ok(Some(self.0))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    none_for!(visit_str: &str);
    none_for_numbers!();
}

/// A JSON list of objects, each read through fields made by its function; a
/// non-object item reads as None in its place, null, a number or a boolean as
/// no list.
pub struct List<M>(pub M);

impl<'de, F: Fields<'de>, M: Fn() -> F> DeserializeSeed<'de> for List<M> {
    type Value = Option<Vec<Option<F>>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: Fields<'de>, M: Fn() -> F> Visitor<'de> for List<M> {
    type Value = Option<Vec<Option<F>>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element_seed(Object((self.0)()))? {
            out.push(item);
        }
        Ok(Some(out))
    }
    // Iterated as Python iterates them: an object by its (distinct) keys, a string by its
    // characters; neither item is an object.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(key) = map.next_key_seed(Key)? {
            map.next_value::<IgnoredAny>()?;
            keys.insert(key);
        }
        Ok(Some(keys.iter().map(|_| None).collect()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.chars().map(|_| None).collect()))
    }
    none_for_numbers!();
}

/// Skip the value of the key just read.
pub fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

#[cfg(test)]
mod tests {
    //! What a projection reads of values that are and are not objects, as
    //! `loop/mirror/slim.py` reads them in Python (`tests/unit/test_watch_decode.py`
    //! holds the binding to it).

    use super::*;

    /// Reads every `name` (a string), skips every other value.
    #[derive(Debug, Default, PartialEq)]
    struct Names(Vec<String>);

    impl<'de> Fields<'de> for Names {
        fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
            match key {
                "name" => self.0.push(map.next_value()?),
                _ => skip(map)?,
            }
            Ok(())
        }
    }

    fn names(names: &[&str]) -> Option<Names> {
        Some(Names(names.iter().map(|n| n.to_string()).collect()))
    }

    fn object(json: &str) -> Option<Names> {
        Object(Names::default())
            .deserialize(&mut serde_json::Deserializer::from_str(json))
            .expect("valid JSON")
    }

    fn list(json: &str) -> Option<Vec<Option<Names>>> {
        List(Names::default)
            .deserialize(&mut serde_json::Deserializer::from_str(json))
            .expect("valid JSON")
    }

    #[test]
    fn an_object_reads_its_kept_fields_and_skips_the_rest() {
        let cases = [
            (r#"{"name":"a","other":{"deep":[1,{"name":"x"}]},"name":"b"}"#, names(&["a", "b"])),
            (r#"{"na\u006de":"escaped"}"#, names(&["escaped"])),
            ("{}", names(&[])),
            // What is not an object reads as None (`x.get(...) or {}`).
            ("[1,2]", None),
            (r#""s""#, None),
            ("1", None),
            ("true", None),
            ("null", None),
        ];
        for (json, want) in cases {
            assert_eq!(object(json), want, "{json}");
        }
    }

    #[test]
    fn a_list_reads_its_objects_and_iterates_other_values_as_python_does() {
        let cases = [
            (r#"[{"name":"a"},3,{"name":"b"}]"#, Some(vec![names(&["a"]), None, names(&["b"])])),
            ("[]", Some(vec![])),
            // An object iterates its distinct keys, a string its characters: no item is an object.
            (r#"{"k":1,"j":2,"k":3}"#, Some(vec![None, None])),
            (r#""abc""#, Some(vec![None, None, None])),
            ("null", None),
            ("1", None),
            ("false", None),
        ];
        for (json, want) in cases {
            assert_eq!(list(json), want, "{json}");
        }
    }
}
