//! A pod watch event in Kubernetes' protobuf, read into the same projection as its JSON.
//!
//! Watched as JSON, every pod event is encoded as JSON by the API server for ksched alone:
//! kube-scheduler, the kubelet and client-go's typed clients watch as protobuf, and the API
//! server encodes an event once per format. Here a protobuf frame is read into the JSON value
//! the API server would have sent, only for the fields the projection keeps (every other field
//! is skipped unread), and that value goes through the JSON decoder's projection
//! (the binding's `watch::decode_pod_frame`, through `projection`), so the two agree by construction wherever the value does.
//!
//! The value follows Kubernetes' JSON rules per field, from the Go types (`k8s.io/api`,
//! `k8s.io/apimachinery`): a pointer appears when set; a value with `omitempty` only when not
//! zero; one without, always (a nil list as `null`); a struct always. Keys come in the Go
//! struct's order, as the JSON has them. Each frame is a `metav1.WatchEvent` (type = 1,
//! object = 2), the object's `RawExtension` holding (raw = 1) the `k8s\0` magic and a
//! `runtime.Unknown` envelope (typeMeta = 1, raw = 2) of the `Pod`, or of a `Status` for an
//! ERROR.

mod schema;
#[cfg(test)]
mod tests;

use serde::de::value::{BorrowedStrDeserializer, Error, MapDeserializer, SeqDeserializer};
use serde::de::{Deserializer, IntoDeserializer, Visitor};

use crate::projection::kept_annotation;
use crate::protobuf::{bytes_of, entry, fields, text, varint_of, Wire};
use schema::{Field, Kind, Show, LIST_META, POD, STATUS};

const MAGIC: &[u8] = b"k8s\x00";

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
                    if matches!(field.kind, Kind::OursMap) && !kept_annotation(k) {
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

/// One page of a protobuf pod list (`GET /api/v1/pods` asked as protobuf) as the JSON value
/// of the list: `metadata` (`resourceVersion`, `continue`) and `items`, each item holding what
/// the projection reads, as a watch event's object does.
pub fn list_value(body: &[u8]) -> Result<V<'_>, String> {
    let (kind, raw) = envelope(body)?;
    if kind != "PodList" {
        return Err(format!("a pod list holding a {kind:?}"));
    }
    let (mut meta, mut items) = (Vec::new(), Vec::new());
    for item in fields(raw) {
        match item? {
            (1, wire) => meta = message(bytes_of(&wire, "metadata")?, LIST_META)?,
            (2, wire) => items.push(V::Obj(message(bytes_of(&wire, "items")?, POD)?)),
            _ => {}
        }
    }
    Ok(V::Obj(vec![("metadata", V::Obj(meta)), ("items", V::List(items))]))
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
