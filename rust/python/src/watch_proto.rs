//! A pod watch event in Kubernetes' protobuf, read into the same projection as its JSON.
//!
//! Watched as JSON, every pod event is encoded as JSON by the API server for ksched alone:
//! kube-scheduler, the kubelet and client-go's typed clients watch as protobuf, and the API
//! server encodes an event once per format. Here a protobuf frame is read into the JSON value
//! the API server would have sent, only for the fields the projection keeps (every other field
//! is skipped unread), and that value goes through the JSON decoder's projection
//! (`watch::decode_pod_frame`), so the two agree by construction wherever the value does.
//!
//! The value follows Kubernetes' JSON rules per field, from the Go types (`k8s.io/api`,
//! `k8s.io/apimachinery`): a pointer appears when set; a value with `omitempty` only when not
//! zero; one without, always (a nil list as `null`); a struct always. Keys come in the Go
//! struct's order, as the JSON has them. Each frame is a `metav1.WatchEvent` (type = 1,
//! object = 2), the object's `RawExtension` holding (raw = 1) the `k8s\0` magic and a
//! `runtime.Unknown` envelope (typeMeta = 1, raw = 2) of the `Pod`, or of a `Status` for an
//! ERROR.

use serde::de::value::{BorrowedStrDeserializer, Error, MapDeserializer, SeqDeserializer};
use serde::de::{Deserializer, IntoDeserializer, Visitor};

const MAGIC: &[u8] = b"k8s\x00";
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// One field of a message's protobuf encoding: a key (number and wire type) and its value.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in their encoded order.
struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.data.split_first().ok_or("a truncated varint")?;
            self.data = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.data.len() {
            return Err("a field longer than its message".into());
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            VARINT => Wire::Varint(self.varint()?),
            LEN => {
                let n = usize::try_from(self.varint()?).map_err(|_| "a length past the address space")?;
                Wire::Bytes(self.take(n)?)
            }
            FIXED64 => {
                self.take(8)?;
                Wire::Fixed
            }
            FIXED32 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(format!("wire type {other} (groups are not used by Kubernetes)")),
        };
        Ok(Some((key >> 3, value)))
    }
}

fn fields(data: &[u8]) -> impl Iterator<Item = Result<(u64, Wire<'_>), String>> {
    let mut reader = Reader { data };
    std::iter::from_fn(move || reader.next().transpose())
}

/// What a field holds.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    /// `metav1.Time`: seconds = 1, nanos = 2; JSON has it to the second, in UTC.
    Time,
    Msg(&'static [Field]),
    /// A message whose fields sit in the parent's JSON object (`Volume`'s `VolumeSource`).
    Inline(&'static [Field]),
    StrList,
    MsgList(&'static [Field]),
    /// `map<string, string>`: entries with key = 1, value = 2.
    StrMap,
    /// `map<string, string>` of which only the keys starting `ksched.io/` are read.
    OursMap,
    /// `ResourceList`: `map<string, Quantity>`, a Quantity being its string (= 1).
    Quantities,
}

/// When a field appears in the JSON.
#[derive(Clone, Copy, PartialEq)]
enum Show {
    /// A pointer, or a list or map with `omitempty`: when present (in protobuf, non-empty).
    Set,
    /// A value with `omitempty`: when not zero.
    NotZero,
    /// A value (or struct) without `omitempty`; a nil list as `null`.
    Always,
}

struct Field {
    number: u64,
    name: &'static str,
    kind: Kind,
    show: Show,
}

const fn f(number: u64, name: &'static str, kind: Kind, show: Show) -> Field {
    Field { number, name, kind, show }
}

use Kind::{Bool, Inline, Int, Msg, MsgList, OursMap, Quantities, Str, StrList, StrMap, Time};
use Show::{Always, NotZero, Set};

// Each message below lists only the fields the projection reads, in the Go struct's order.
const OWNER_REFERENCE: &[Field] = &[
    f(5, "apiVersion", Str, Always),
    f(1, "kind", Str, Always),
    f(3, "name", Str, Always),
    f(4, "uid", Str, Always),
    f(6, "controller", Bool, Set),
    f(7, "blockOwnerDeletion", Bool, Set),
];
const OBJECT_META: &[Field] = &[
    f(1, "name", Str, NotZero),
    f(3, "namespace", Str, NotZero),
    f(5, "uid", Str, NotZero),
    f(6, "resourceVersion", Str, NotZero),
    f(8, "creationTimestamp", Time, NotZero),
    f(9, "deletionTimestamp", Time, Set),
    f(11, "labels", StrMap, Set),
    f(12, "annotations", OursMap, Set),
    f(13, "ownerReferences", MsgList(OWNER_REFERENCE), Set),
];
const RESOURCE_CLAIM: &[Field] = &[f(1, "name", Str, Always), f(2, "request", Str, NotZero)];
const RESOURCES: &[Field] = &[
    f(1, "limits", Quantities, Set),
    f(2, "requests", Quantities, Set),
    f(3, "claims", MsgList(RESOURCE_CLAIM), Set),
];
const CONTAINER_PORT: &[Field] = &[
    f(1, "name", Str, NotZero),
    f(2, "hostPort", Int, NotZero),
    f(3, "containerPort", Int, Always),
    f(4, "protocol", Str, NotZero),
    f(5, "hostIP", Str, NotZero),
];
const CONTAINER: &[Field] = &[
    f(1, "name", Str, Always),
    f(2, "image", Str, NotZero),
    f(6, "ports", MsgList(CONTAINER_PORT), Set),
    f(8, "resources", Msg(RESOURCES), Always),
    f(24, "restartPolicy", Str, Set),
];
const NODE_SELECTOR_REQUIREMENT: &[Field] = &[
    f(1, "key", Str, Always),
    f(2, "operator", Str, Always),
    f(3, "values", StrList, Set),
];
const NODE_SELECTOR_TERM: &[Field] = &[
    f(1, "matchExpressions", MsgList(NODE_SELECTOR_REQUIREMENT), Set),
    f(2, "matchFields", MsgList(NODE_SELECTOR_REQUIREMENT), Set),
];
const NODE_SELECTOR: &[Field] = &[f(1, "nodeSelectorTerms", MsgList(NODE_SELECTOR_TERM), Always)];
const PREFERRED_SCHEDULING_TERM: &[Field] = &[f(1, "weight", Int, Always), f(2, "preference", Msg(NODE_SELECTOR_TERM), Always)];
const NODE_AFFINITY: &[Field] = &[
    f(1, "requiredDuringSchedulingIgnoredDuringExecution", Msg(NODE_SELECTOR), Set),
    f(
        2,
        "preferredDuringSchedulingIgnoredDuringExecution",
        MsgList(PREFERRED_SCHEDULING_TERM),
        Set,
    ),
];
const LABEL_SELECTOR_REQUIREMENT: &[Field] = NODE_SELECTOR_REQUIREMENT;
const LABEL_SELECTOR: &[Field] = &[
    f(1, "matchLabels", StrMap, Set),
    f(2, "matchExpressions", MsgList(LABEL_SELECTOR_REQUIREMENT), Set),
];
const POD_AFFINITY_TERM: &[Field] = &[
    f(1, "labelSelector", Msg(LABEL_SELECTOR), Set),
    f(2, "namespaces", StrList, Set),
    f(3, "topologyKey", Str, Always),
    f(4, "namespaceSelector", Msg(LABEL_SELECTOR), Set),
    f(5, "matchLabelKeys", StrList, Set),
    f(6, "mismatchLabelKeys", StrList, Set),
];
const WEIGHTED_POD_AFFINITY_TERM: &[Field] = &[f(1, "weight", Int, Always), f(2, "podAffinityTerm", Msg(POD_AFFINITY_TERM), Always)];
const POD_AFFINITY: &[Field] = &[
    f(1, "requiredDuringSchedulingIgnoredDuringExecution", MsgList(POD_AFFINITY_TERM), Set),
    f(
        2,
        "preferredDuringSchedulingIgnoredDuringExecution",
        MsgList(WEIGHTED_POD_AFFINITY_TERM),
        Set,
    ),
];
const AFFINITY: &[Field] = &[
    f(1, "nodeAffinity", Msg(NODE_AFFINITY), Set),
    f(2, "podAffinity", Msg(POD_AFFINITY), Set),
    f(3, "podAntiAffinity", Msg(POD_AFFINITY), Set),
];
const TOLERATION: &[Field] = &[
    f(1, "key", Str, NotZero),
    f(2, "operator", Str, NotZero),
    f(3, "value", Str, NotZero),
    f(4, "effect", Str, NotZero),
    f(5, "tolerationSeconds", Int, Set),
];
const TOPOLOGY_SPREAD_CONSTRAINT: &[Field] = &[
    f(1, "maxSkew", Int, Always),
    f(2, "topologyKey", Str, Always),
    f(3, "whenUnsatisfiable", Str, Always),
    f(4, "labelSelector", Msg(LABEL_SELECTOR), Set),
    f(5, "minDomains", Int, Set),
    f(6, "nodeAffinityPolicy", Str, Set),
    f(7, "nodeTaintsPolicy", Str, Set),
    f(8, "matchLabelKeys", StrList, Set),
];
const SCHEDULING_GATE: &[Field] = &[f(1, "name", Str, Always)];
const POD_RESOURCE_CLAIM: &[Field] = &[
    f(1, "name", Str, Always),
    f(3, "resourceClaimName", Str, Set),
    f(4, "resourceClaimTemplateName", Str, Set),
];
const CLAIM_VOLUME_SOURCE: &[Field] = &[f(1, "claimName", Str, Always), f(2, "readOnly", Bool, NotZero)];
const IMAGE_VOLUME_SOURCE: &[Field] = &[f(1, "reference", Str, NotZero), f(2, "pullPolicy", Str, NotZero)];
/// An ephemeral volume counts by its presence; what it holds is not read.
const UNREAD: &[Field] = &[];
const VOLUME_SOURCE: &[Field] = &[
    f(10, "persistentVolumeClaim", Msg(CLAIM_VOLUME_SOURCE), Set),
    f(29, "ephemeral", Msg(UNREAD), Set),
    f(30, "image", Msg(IMAGE_VOLUME_SOURCE), Set),
];
const VOLUME: &[Field] = &[f(1, "name", Str, Always), f(2, "", Inline(VOLUME_SOURCE), Always)];
const POD_SPEC: &[Field] = &[
    f(1, "volumes", MsgList(VOLUME), Set),
    f(20, "initContainers", MsgList(CONTAINER), Set),
    f(2, "containers", MsgList(CONTAINER), Always),
    f(7, "nodeSelector", StrMap, Set),
    f(10, "nodeName", Str, NotZero),
    f(18, "affinity", Msg(AFFINITY), Set),
    f(19, "schedulerName", Str, NotZero),
    f(22, "tolerations", MsgList(TOLERATION), Set),
    f(24, "priorityClassName", Str, NotZero),
    f(25, "priority", Int, Set),
    f(31, "preemptionPolicy", Str, Set),
    f(32, "overhead", Quantities, Set),
    f(33, "topologySpreadConstraints", MsgList(TOPOLOGY_SPREAD_CONSTRAINT), Set),
    f(38, "schedulingGates", MsgList(SCHEDULING_GATE), Set),
    f(39, "resourceClaims", MsgList(POD_RESOURCE_CLAIM), Set),
    f(40, "resources", Msg(RESOURCES), Set),
];
const POD_CONDITION: &[Field] = &[
    f(1, "type", Str, Always),
    f(2, "status", Str, Always),
    f(5, "reason", Str, NotZero),
    f(6, "message", Str, NotZero),
];
const CONTAINER_STATUS: &[Field] = &[
    f(1, "name", Str, Always),
    f(10, "allocatedResources", Quantities, Set),
    f(11, "resources", Msg(RESOURCES), Set),
];
const POD_STATUS: &[Field] = &[
    f(1, "phase", Str, NotZero),
    f(2, "conditions", MsgList(POD_CONDITION), Set),
    f(11, "nominatedNodeName", Str, NotZero),
    f(7, "startTime", Time, Set),
    f(10, "initContainerStatuses", MsgList(CONTAINER_STATUS), Set),
    f(8, "containerStatuses", MsgList(CONTAINER_STATUS), Set),
    f(19, "allocatedResources", Quantities, Set),
    f(20, "resources", Msg(RESOURCES), Set),
];
const POD: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META), Always),
    f(2, "spec", Msg(POD_SPEC), Always),
    f(3, "status", Msg(POD_STATUS), Always),
];
/// `metav1.Status`, what an ERROR event holds.
const STATUS: &[Field] = &[
    f(3, "message", Str, NotZero),
    f(4, "reason", Str, NotZero),
    f(6, "code", Int, NotZero),
];
const OURS: &str = "ksched.io/";

fn text(data: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(data).map_err(|_| "a string that is not UTF-8".into())
}

fn bytes_of<'a>(wire: &Wire<'a>, name: &str) -> Result<&'a [u8], String> {
    match wire {
        Wire::Bytes(data) => Ok(data),
        _ => Err(format!("{name}: not length-delimited")),
    }
}

fn varint_of(wire: &Wire<'_>, name: &str) -> Result<u64, String> {
    match wire {
        Wire::Varint(v) => Ok(*v),
        _ => Err(format!("{name}: not a varint")),
    }
}

/// A map entry's key (= 1) and value (= 2) bytes; protobuf's default (empty) where absent.
fn entry(data: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let (mut k, mut v): (&[u8], &[u8]) = (b"", b"");
    for item in fields(data) {
        match item? {
            (1, wire) => k = bytes_of(&wire, "map key")?,
            (2, wire) => v = bytes_of(&wire, "map value")?,
            _ => {}
        }
    }
    Ok((k, v))
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `metav1.Time` as its JSON: RFC 3339 in UTC to the second; the zero time (an empty message)
/// as null.
fn time(data: &[u8]) -> Result<V<'static>, String> {
    let mut seconds = None;
    for item in fields(data) {
        if let (1, wire) = item? {
            // int64, two's complement in a varint
            seconds = Some(varint_of(&wire, "seconds")? as i64);
        }
    }
    let Some(seconds) = seconds else {
        return Ok(V::Null);
    };
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    Ok(V::Text(format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )))
}

/// A JSON value whose strings are borrowed from the frame: what the projection's decoder reads
/// (as a serde `Deserializer`) in place of a parsed JSON line.
#[derive(Debug, PartialEq)]
pub enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Text(String),
    List(Vec<V<'a>>),
    Obj(Vec<(&'a str, V<'a>)>),
}

impl V<'_> {
    fn is_zero(&self) -> bool {
        match self {
            V::Null => true,
            V::Bool(b) => !b,
            V::Int(n) => *n == 0,
            V::Str(s) => s.is_empty(),
            V::Text(s) => s.is_empty(),
            V::List(items) => items.is_empty(),
            V::Obj(fields) => fields.is_empty(),
        }
    }
}

/// An object key, handed to the visitor borrowed.
struct Key<'a>(&'a str);

impl<'de> IntoDeserializer<'de, Error> for Key<'de> {
    type Deserializer = BorrowedStrDeserializer<'de, Error>;
    fn into_deserializer(self) -> Self::Deserializer {
        BorrowedStrDeserializer::new(self.0)
    }
}

impl<'de> IntoDeserializer<'de, Error> for V<'de> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for V<'de> {
    type Error = Error;
    fn deserialize_any<Vis: Visitor<'de>>(self, visitor: Vis) -> Result<Vis::Value, Error> {
        match self {
            V::Null => visitor.visit_unit(),
            V::Bool(b) => visitor.visit_bool(b),
            V::Int(n) => visitor.visit_i64(n),
            V::Str(s) => visitor.visit_borrowed_str(s),
            V::Text(s) => visitor.visit_string(s),
            V::List(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter());
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            V::Obj(fields) => {
                let mut map = MapDeserializer::new(fields.into_iter().map(|(k, v)| (Key(k), v)));
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// A message read into the JSON object of its listed fields (the others are skipped).
fn message<'a>(data: &'a [u8], schema: &'static [Field]) -> Result<Vec<(&'a str, V<'a>)>, String> {
    let mut out = Vec::new();
    fill(&mut out, data, schema)?;
    Ok(out)
}

fn fill<'a>(out: &mut Vec<(&'a str, V<'a>)>, data: &'a [u8], schema: &'static [Field]) -> Result<(), String> {
    // The listed fields' values as they arrived, each with its place in the schema (a repeated
    // field or a map has one per item).
    let mut found: Vec<(usize, Wire<'a>)> = Vec::new();
    for item in fields(data) {
        let (number, wire) = item?;
        if let Some(i) = schema.iter().position(|field| field.number == number) {
            found.push((i, wire));
        }
    }
    // Grouped by field, each group in the order it arrived.
    found.sort_by_key(|(at, _)| *at);
    let mut rest = &found[..];
    for (i, field) in schema.iter().enumerate() {
        let n = rest.iter().take_while(|(at, _)| *at == i).count();
        let (group, tail) = rest.split_at(n);
        rest = tail;
        let present = n > 0;
        let items = group.iter().map(|(_, wire)| wire);
        // A singular field written twice: the last one counts, as protobuf reads it.
        let last = group.last().map(|(_, wire)| wire);
        let value = match field.kind {
            Kind::Inline(inner) => {
                // Protobuf merges a repeated singular message; Kubernetes writes it once.
                for wire in items {
                    fill(out, bytes_of(wire, field.name)?, inner)?;
                }
                continue;
            }
            Kind::StrList => V::List(
                items
                    .map(|w| text(bytes_of(w, field.name)?).map(V::Str))
                    .collect::<Result<_, String>>()?,
            ),
            Kind::MsgList(inner) => V::List(
                items
                    .map(|w| message(bytes_of(w, field.name)?, inner).map(V::Obj))
                    .collect::<Result<_, String>>()?,
            ),
            Kind::StrMap | Kind::OursMap | Kind::Quantities => {
                let mut map = Vec::new();
                for wire in items {
                    let (k, v) = entry(bytes_of(wire, field.name)?)?;
                    let k = text(k)?;
                    if matches!(field.kind, Kind::OursMap) && !k.starts_with(OURS) {
                        continue;
                    }
                    let v = if matches!(field.kind, Kind::Quantities) {
                        entry(v)?.0 // Quantity's string is its field 1
                    } else {
                        v
                    };
                    // A repeated key keeps its first place and its last value, as a dict does.
                    match map.iter_mut().find(|(seen, _)| *seen == k) {
                        Some(slot) => slot.1 = V::Str(text(v)?),
                        None => map.push((k, V::Str(text(v)?))),
                    }
                }
                V::Obj(map)
            }
            Kind::Str => match last {
                Some(w) => V::Str(text(bytes_of(w, field.name)?)?),
                None => V::Str(""),
            },
            // int32 and int64 alike: a negative int32 is written sign-extended to 64 bits.
            Kind::Int => V::Int(last.map_or(Ok(0), |w| varint_of(w, field.name))? as i64),
            Kind::Bool => V::Bool(last.map_or(Ok(0), |w| varint_of(w, field.name))? != 0),
            Kind::Time => match last {
                Some(w) => time(bytes_of(w, field.name)?)?,
                None => V::Null,
            },
            Kind::Msg(inner) => {
                let mut fields = Vec::new();
                for wire in items {
                    fill(&mut fields, bytes_of(wire, field.name)?, inner)?;
                }
                if !present {
                    // A struct value absent from the encoding is its zero value.
                    fill(&mut fields, b"", inner)?;
                }
                V::Obj(fields)
            }
        };
        let list_or_map = matches!(
            field.kind,
            Kind::StrList | Kind::MsgList(_) | Kind::StrMap | Kind::OursMap | Kind::Quantities
        );
        let shown = match field.show {
            Show::Set if list_or_map => !value.is_zero(),
            Show::Set => present,
            Show::NotZero => !value.is_zero(),
            Show::Always => true,
        };
        if shown {
            let value = if list_or_map && field.show == Show::Always && value.is_zero() {
                V::Null // a nil list without omitempty
            } else {
                value
            };
            out.push((field.name, value));
        }
    }
    Ok(())
}

/// The `runtime.Unknown` after the magic: (kind, raw).
fn envelope(data: &[u8]) -> Result<(&str, &[u8]), String> {
    let body = data.strip_prefix(MAGIC).ok_or("no k8s protobuf magic")?;
    let (mut kind, mut raw) = ("", &b""[..]);
    for item in fields(body) {
        match item? {
            (1, wire) => {
                for meta in fields(bytes_of(&wire, "typeMeta")?) {
                    if let (2, w) = meta? {
                        kind = text(bytes_of(&w, "kind")?)?;
                    }
                }
            }
            (2, wire) => raw = bytes_of(&wire, "raw")?,
            _ => {}
        }
    }
    Ok((kind, raw))
}

/// One frame of a protobuf pod watch as the JSON value of its event (`type` and `object`),
/// holding of the object only what the projection reads.
pub fn event_value(frame: &[u8]) -> Result<V<'_>, String> {
    let (mut event_type, mut object) = ("", &b""[..]);
    for item in fields(frame) {
        match item? {
            (1, wire) => event_type = text(bytes_of(&wire, "type")?)?,
            (2, wire) => {
                for ext in fields(bytes_of(&wire, "object")?) {
                    if let (1, w) = ext? {
                        object = bytes_of(&w, "object.raw")?;
                    }
                }
            }
            _ => {}
        }
    }
    let (object_kind, body) = envelope(object)?;
    let schema = match object_kind {
        "Pod" => POD,
        "Status" => STATUS,
        other => return Err(format!("a pod watch event holding a {other:?}")),
    };
    Ok(V::Obj(vec![
        ("type", V::Str(event_type)),
        ("object", V::Obj(message(body, schema)?)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A value as JSON, to compare with `json!` (key order aside).
    fn js(v: V<'_>) -> Value {
        match v {
            V::Null => Value::Null,
            V::Bool(b) => Value::Bool(b),
            V::Int(n) => Value::from(n),
            V::Str(s) => Value::from(s),
            V::Text(s) => Value::from(s),
            V::List(items) => Value::Array(items.into_iter().map(js).collect()),
            V::Obj(fields) => Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), js(v))).collect()),
        }
    }

    fn obj(fields: Vec<(&str, V<'_>)>) -> Value {
        js(V::Obj(fields))
    }

    fn key(number: u64, wire: u64) -> Vec<u8> {
        varint(number << 3 | wire)
    }

    fn varint(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while n > 0x7f {
            out.push((n & 0x7f) as u8 | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out
    }

    fn len(number: u64, data: &[u8]) -> Vec<u8> {
        [key(number, LEN), varint(data.len() as u64), data.to_vec()].concat()
    }

    fn int(number: u64, value: i64) -> Vec<u8> {
        [key(number, VARINT), varint(value as u64)].concat()
    }

    #[test]
    fn times_read_as_rfc3339_utc_seconds() {
        let at = |s: i64| time(&[int(1, s), int(2, 999)].concat()).unwrap();
        assert_eq!(at(0), V::Text("1970-01-01T00:00:00Z".into()));
        assert_eq!(at(1_795_712_562), V::Text("2026-11-26T17:02:42Z".into()));
        assert_eq!(at(951_782_400), V::Text("2000-02-29T00:00:00Z".into()));
        assert_eq!(at(-1), V::Text("1969-12-31T23:59:59Z".into()));
        assert_eq!(time(b"").unwrap(), V::Null);
    }

    #[test]
    fn json_presence_follows_the_go_types() {
        // hostPort 0 (omitempty) is left out, containerPort 0 (no omitempty) kept; a negative
        // int32 arrives sign-extended.
        let port = [int(2, 0), int(3, 0), len(4, b"TCP")].concat();
        assert_eq!(
            obj(message(&port, CONTAINER_PORT).unwrap()),
            json!({"containerPort": 0, "protocol": "TCP"})
        );
        let toleration = [len(1, b"k"), int(5, -1)].concat();
        assert_eq!(
            obj(message(&toleration, TOLERATION).unwrap()),
            json!({"key": "k", "tolerationSeconds": -1})
        );
        // A pointer set to zero shows; a nil list without omitempty is null; keys in Go order.
        let spec = [len(19, b"ksched"), int(25, 0)].concat();
        let spec = message(&spec, POD_SPEC).unwrap();
        assert_eq!(
            spec.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            ["containers", "schedulerName", "priority"]
        );
        assert_eq!(obj(spec), json!({"containers": null, "schedulerName": "ksched", "priority": 0}));
    }

    #[test]
    fn maps_quantities_and_inline_volume_sources() {
        let quantity = |k: &[u8], v: &[u8]| len(1, &[len(1, k), len(2, &len(1, v))].concat());
        let r = [quantity(b"cpu", b"100m"), quantity(b"memory", b"1Gi")].concat();
        assert_eq!(
            obj(message(&r, RESOURCES).unwrap()),
            json!({"limits": {"cpu": "100m", "memory": "1Gi"}})
        );
        let annotations = [
            len(12, &[len(1, b"other"), len(2, b"x")].concat()),
            len(12, &[len(1, b"ksched.io/a"), len(2, b"1")].concat()),
        ];
        let meta = annotations.concat();
        assert_eq!(
            obj(message(&meta, OBJECT_META).unwrap()),
            json!({"annotations": {"ksched.io/a": "1"}})
        );
        let source = len(2, &len(10, &len(1, b"data")));
        let v = [len(1, b"v"), source].concat();
        assert_eq!(
            obj(message(&v, VOLUME).unwrap()),
            json!({"name": "v", "persistentVolumeClaim": {"claimName": "data"}})
        );
    }

    #[test]
    fn frames_are_checked() {
        let typed = |kind: &[u8], raw: &[u8]| [MAGIC, &len(1, &len(2, kind)), &len(2, raw)].concat();
        let event = |t: &[u8], object: &[u8]| [len(1, t), len(2, &len(1, object))].concat();
        assert!(event_value(b"{}").is_err());
        assert!(event_value(&event(b"ADDED", b"{}")).unwrap_err().contains("magic"));
        assert!(event_value(&event(b"ADDED", &typed(b"Node", b""))).unwrap_err().contains("Node"));
        let status = typed(b"Status", &[len(4, b"Expired"), int(6, 410)].concat());
        assert_eq!(
            js(event_value(&event(b"ERROR", &status)).unwrap()),
            json!({"type": "ERROR", "object": {"reason": "Expired", "code": 410}})
        );
        let truncated = [len(1, b"ADDED"), vec![0x12, 0x05, 0x0a]].concat();
        assert!(event_value(&truncated).is_err());
    }
}
