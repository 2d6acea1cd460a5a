//! A Prometheus instant query's answer, decoded without the GIL.
//!
//! The metric refresh threads ask Prometheus for one vector per metric with a
//! series for every node (770 KB of JSON at 5,000 nodes). Parsed in Python,
//! that held the GIL for about 20 ms a refresh, twice a second with two live
//! metrics, and pods waiting on the scheduling thread paid for it. Here the
//! answer is read in one pass that keeps only each series' node label and
//! value (no map of every label, no tree of the document), beside the
//! scheduling thread.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::error::Category;

/// The answer of `/api/v1/query` for an instant vector: each series' node label
/// value (empty where the series has no such label) and value, finite values only.
#[derive(Default)]
pub struct InstantVector {
    pub labels: Vec<String>,
    pub values: Vec<f64>,
    /// The oldest sample time (seconds since the epoch), `None` for an empty vector.
    pub oldest: Option<f64>,
    /// Series whose value is NaN or infinite (left out of `labels` and `values`).
    pub not_finite: usize,
}

const NOT_A_VECTOR: &str = "the query does not return an instant vector";

/// Decode `body`, the JSON answer of an instant query, keeping each series' `label`.
pub fn decode(body: &[u8], label: &str) -> Result<InstantVector, String> {
    let mut reader = Reader {
        label,
        out: InstantVector::default(),
        why: None,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let answer = Field {
        key: "data",
        what: "a Prometheus API answer (an object)",
        seed: Field {
            key: "result",
            what: "the answer's data (an object)",
            seed: Series(&mut reader),
        },
    };
    let read = answer.deserialize(&mut de).and_then(|found| de.end().map(|()| found));
    match read {
        Ok(Some(Some(()))) => Ok(reader.out),
        Ok(_) => Err("the answer has no data.result".to_string()),
        Err(err) if err.classify() == Category::Data => Err(reader.why.unwrap_or_else(|| without_position(&err))),
        Err(err) => Err(format!("the answer is not JSON: {err}")),
    }
}

/// serde_json's message without its " at line 1 column 42".
fn without_position(err: &serde_json::Error) -> String {
    let message = err.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

/// What the decoding keeps, and why it stopped where it did (serde's own
/// message would say "invalid type" where the user needs to hear the query's fault).
struct Reader<'l> {
    label: &'l str,
    out: InstantVector,
    why: Option<String>,
}

impl Reader<'_> {
    fn fail<E: de::Error>(&mut self, why: String) -> E {
        let error = E::custom(&why);
        self.why.get_or_insert(why);
        error
    }
}

/// Which of `names` a map key is (`None`: a key of no interest), read without a copy.
struct Key<'k>(&'k [&'k str]);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Key<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|&name| name == key))
    }
}

/// An object of which one key matters: its value, read by `seed` (`None` where the key is
/// absent); every other key, and a repeated one, is skipped.
struct Field<S> {
    key: &'static str,
    what: &'static str,
    seed: S,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Field<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Field<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.what)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seed = Some(self.seed);
        let mut found = None;
        while let Some(key) = map.next_key_seed(Key(std::slice::from_ref(&self.key)))? {
            match (key, seed.take()) {
                (Some(_), Some(wanted)) => found = Some(map.next_value_seed(wanted)?),
                (_, unused) => {
                    seed = unused;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// `data.result`: a list of series (an instant vector), anything else refused.
struct Series<'r, 'l>(&'r mut Reader<'l>);

impl<'de> DeserializeSeed<'de> for Series<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Series<'_, '_> {
    fn not_a_list<E: de::Error>(self, kind: &str) -> Result<(), E> {
        Err(self.0.fail(format!("expected an instant vector, got {kind}")))
    }
}

impl<'de> Visitor<'de> for Series<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an instant vector")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            match seq.next_element_seed(OneSeries(&mut *self.0)) {
                Ok(Some(())) => {}
                Ok(None) => return Ok(()),
                Err(err) => {
                    // A scalar's or a string's `[time, "value"]` has no series objects.
                    self.0.why.get_or_insert_with(|| NOT_A_VECTOR.to_string());
                    return Err(err);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.not_a_list("object")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.not_a_list("string")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.not_a_list("number")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.not_a_list("number")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.not_a_list("number")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.not_a_list("bool")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.not_a_list("null")
    }
}

/// One series, `{"metric": {labels}, "value": [time, "value"]}`, added to the vector.
struct OneSeries<'r, 'l>(&'r mut Reader<'l>);

impl<'de> DeserializeSeed<'de> for OneSeries<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for OneSeries<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a series")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut label = None;
        let mut sample = None;
        while let Some(key) = map.next_key_seed(Key(&["metric", "value"]))? {
            match key {
                Some(0) => label = map.next_value_seed(Labels(self.0.label))?,
                Some(_) => sample = Some(map.next_value_seed(Sample(&mut *self.0))?),
                None => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        // A matrix's series have `values`, not `value`.
        let Some((time, value)) = sample else {
            return Err(self.0.fail(NOT_A_VECTOR.to_string()));
        };
        let out = &mut self.0.out;
        out.oldest = Some(out.oldest.map_or(time, |oldest| oldest.min(time)));
        if value.is_finite() {
            out.labels.push(label.unwrap_or_default());
            out.values.push(value);
        } else {
            out.not_finite += 1;
        }
        Ok(())
    }
}

/// A series' labels: the value of one of them (`None` where it is absent or not a string).
struct Labels<'l>(&'l str);

impl<'de> DeserializeSeed<'de> for Labels<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Labels<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a series' labels (an object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(wanted) = map.next_key_seed(LabelName(self.0))? {
            if wanted {
                found = map.next_value::<serde_json::Value>()?.as_str().map(str::to_string);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a label's name is the one wanted.
struct LabelName<'l>(&'l str);

impl<'de> DeserializeSeed<'de> for LabelName<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for LabelName<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a label name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

/// A sample, `[time, "value"]`: the time and the value (Prometheus writes `"NaN"`, `"+Inf"`).
struct Sample<'r, 'l>(&'r mut Reader<'l>);

impl<'de> DeserializeSeed<'de> for Sample<'_, '_> {
    type Value = (f64, f64);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Sample<'_, '_> {
    type Value = (f64, f64);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sample [time, value]")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let Some(time) = seq.next_element::<f64>()? else {
            return Err(self.0.fail(NOT_A_VECTOR.to_string()));
        };
        let Some(raw) = seq.next_element::<serde_json::Value>()? else {
            return Err(self.0.fail(NOT_A_VECTOR.to_string()));
        };
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(self.0.fail(NOT_A_VECTOR.to_string()));
        }
        let value = match &raw {
            serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
            serde_json::Value::Number(n) => n.as_f64(),
            _ => None,
        };
        match value {
            Some(value) => Ok((time, value)),
            None => Err(self.0.fail(format!("value {raw} is not a number"))),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Answers as Prometheus writes them (the cases `tests/unit/test_sources.py`
    //! sends through a real HTTP source), decoded here without Python.

    use super::*;

    fn vector(series: &[(&str, f64, &str)]) -> Vec<u8> {
        let result: Vec<String> = series
            .iter()
            .map(|(labels, at, raw)| format!(r#"{{"metric":{{{labels}}},"value":[{at},"{raw}"]}}"#))
            .collect();
        format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            result.join(",")
        )
        .into_bytes()
    }

    #[test]
    fn series_keep_their_label_and_finite_value() {
        let body = vector(&[
            (r#""node":"n1","job":"x""#, 1000.5, "0.25"),
            (r#""node":"10.0.0.2:9100""#, 999.0, "1e-3"),
            (r#""node":"n3""#, 1001.0, "NaN"),
            (r#""node":"elsewhere""#, 1002.0, "+Inf"),
            (r#""job":"no node label""#, 1004.0, "-2"),
        ]);
        let got = decode(&body, "node").expect("an instant vector");
        assert_eq!(got.labels, ["n1", "10.0.0.2:9100", ""], "a series without the label reads as \"\"");
        assert_eq!(got.values, [0.25, 0.001, -2.0]);
        assert_eq!(got.not_finite, 2, "NaN and +Inf are counted, never kept");
        assert_eq!(got.oldest, Some(999.0), "the oldest sample time, not the newest");
        let by_job = decode(&body, "job").expect("an instant vector");
        assert_eq!(by_job.labels, ["x", "", "no node label"]);
    }

    #[test]
    fn an_empty_vector_has_no_sample_time() {
        let got = decode(&vector(&[]), "node").expect("an instant vector");
        assert!(got.labels.is_empty() && got.values.is_empty());
        assert_eq!((got.oldest, got.not_finite), (None, 0));
    }

    #[test]
    fn answers_that_are_not_a_vector_of_numbers_say_why() {
        let trailing = [vector(&[(r#""node":"n1""#, 1.0, "1")]), b" {}".to_vec()].concat();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "scalar",
                br#"{"status":"success","data":{"resultType":"scalar","result":[1000,"2"]}}"#.to_vec(),
                NOT_A_VECTOR,
            ),
            (
                "string",
                br#"{"status":"success","data":{"resultType":"string","result":[1000,"a"]}}"#.to_vec(),
                NOT_A_VECTOR,
            ),
            (
                "matrix",
                br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}"#.to_vec(),
                NOT_A_VECTOR,
            ),
            (
                "not a list",
                br#"{"status":"success","data":{"result":{"x":1}}}"#.to_vec(),
                "expected an instant vector, got object",
            ),
            ("no result", br#"{"status":"success"}"#.to_vec(), "the answer has no data.result"),
            ("not JSON", b"<html>proxy error</html>".to_vec(), "the answer is not JSON"),
            ("trailing", trailing, "the answer is not JSON: trailing characters"),
            ("not an object", b"[1]".to_vec(), "expected a Prometheus API answer"),
            (
                "not a number",
                vector(&[(r#""node":"n1""#, 1.0, "fast")]),
                r#"value "fast" is not a number"#,
            ),
        ];
        for (name, body, want) in cases {
            let got = decode(&body, "node").err().unwrap_or_else(|| panic!("{name}: decoded"));
            assert!(got.contains(want), "{name}: want {want:?} in {got:?}");
        }
    }
}
