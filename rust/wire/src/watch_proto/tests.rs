//! The protobuf reader on hand-built frames: times, JSON presence per the Go
//! types, maps, quantities, inline volume sources, and malformed frames.

use super::schema::{CONTAINER_PORT, OBJECT_META, POD_SPEC, RESOURCES, TOLERATION, VOLUME};
use super::*;
use crate::protobuf::{LEN, VARINT};
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

#[test]
fn list_pages_read_their_items_and_paging() {
    let typed = |kind: &[u8], raw: &[u8]| [MAGIC, &len(1, &len(2, kind)), &len(2, raw)].concat();
    let meta = [len(2, b"42"), len(3, b"next-token"), int(4, 7)].concat();
    let pod = |name: &[u8]| len(1, &len(1, name));
    let page = typed(b"PodList", &[len(1, &meta), len(2, &pod(b"a")), len(2, &pod(b"b"))].concat());
    let value = js(list_value(&page).unwrap());
    assert_eq!(value["metadata"], json!({"resourceVersion": "42", "continue": "next-token"}));
    let names: Vec<&Value> = value["items"].as_array().unwrap().iter().map(|p| &p["metadata"]["name"]).collect();
    assert_eq!(names, [&json!("a"), &json!("b")]);
    // The last page: no continue token, and no items at all in an empty list.
    let last = typed(b"PodList", &len(1, &len(2, b"43")));
    assert_eq!(
        js(list_value(&last).unwrap()),
        json!({"metadata": {"resourceVersion": "43"}, "items": []})
    );
    assert!(list_value(&typed(b"NodeList", b"")).unwrap_err().contains("NodeList"));
    assert!(list_value(b"{\"items\": []}").unwrap_err().contains("magic"));
}
