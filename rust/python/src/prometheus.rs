//! A Prometheus instant query's answer, decoded without the GIL.
//!
//! The metric refresh threads ask Prometheus for one vector per metric with a
//! series for every node (770 KB of JSON at 5,000 nodes). Parsed in Python,
//! that held the GIL for about 20 ms a refresh, twice a second with two live
//! metrics, and pods waiting on the scheduling thread paid for it; here the
//! parse runs beside the scheduling thread, and only the node label's values
//! and the numbers cross back.

use serde_json::Value;

/// The answer of `/api/v1/query` for an instant vector: each series' node label
/// value (empty where the series has no such label) and value, finite values only.
pub struct InstantVector {
    pub labels: Vec<String>,
    pub values: Vec<f64>,
    /// The oldest sample time (seconds since the epoch), `None` for an empty vector.
    pub oldest: Option<f64>,
    /// Series whose value is NaN or infinite (left out of `labels` and `values`).
    pub not_finite: usize,
}

const NOT_A_VECTOR: &str = "the query does not return an instant vector";

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// A sample value as Prometheus writes it: a string such as `"0.25"`, `"NaN"` or `"+Inf"`.
fn number(raw: &Value) -> Option<f64> {
    match raw {
        Value::String(s) => s.trim().parse::<f64>().ok(),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// Decode `body`, the JSON answer of an instant query, keeping each series' `label`.
pub fn decode(body: &[u8], label: &str) -> Result<InstantVector, String> {
    let root: Value = serde_json::from_slice(body).map_err(|err| format!("the answer is not JSON: {err}"))?;
    let result = root
        .get("data")
        .and_then(|data| data.get("result"))
        .ok_or_else(|| "the answer has no data.result".to_string())?;
    let Value::Array(series) = result else {
        return Err(format!("expected an instant vector, got {}", kind(result)));
    };
    let mut out = InstantVector {
        labels: Vec::with_capacity(series.len()),
        values: Vec::with_capacity(series.len()),
        oldest: None,
        not_finite: 0,
    };
    for one in series {
        // A scalar or string result is `[time, "value"]`, a matrix's series have `values`.
        let Some([time, raw]) = one.get("value").and_then(Value::as_array).map(Vec::as_slice) else {
            return Err(NOT_A_VECTOR.to_string());
        };
        let time = time.as_f64().ok_or_else(|| NOT_A_VECTOR.to_string())?;
        let value = number(raw).ok_or_else(|| format!("value {raw} is not a number"))?;
        out.oldest = Some(out.oldest.map_or(time, |oldest: f64| oldest.min(time)));
        if !value.is_finite() {
            out.not_finite += 1;
            continue;
        }
        let name = one.get("metric").and_then(|m| m.get(label)).and_then(Value::as_str);
        out.labels.push(name.unwrap_or_default().to_string());
        out.values.push(value);
    }
    Ok(out)
}
