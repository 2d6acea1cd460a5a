//! Python values -> engine settings, and engine results -> Python, written once.
//!
//! The profile and the metric specs arrive as dicts with named fields
//! (`ksched.core_types.Profile`, `MetricSpec`); plugins are named as in the
//! engine's registry, and an unknown name is an error that lists the known ones.
//! [`profile_dict`] writes a profile back in the dict [`profile`] reads, so the
//! engine's default profile can be exported and compared with Python's.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrays::value;
use ksched_core::registry::{plugin_by_name, PluginId, PLUGINS, PLUGIN_COUNT};
use ksched_core::{Explanation, MetricSpec, Missing, Outcome, Prefer, Profile, Strategy};

/// The registry plugin `name`, which must have the extension point `has`.
fn plugin(name: &str, point: &str, has: impl Fn(usize) -> bool) -> PyResult<PluginId> {
    let id = plugin_by_name(name).filter(|&id| has(id as usize));
    id.ok_or_else(|| {
        let known: Vec<&str> = (0..PLUGIN_COUNT).filter(|&i| has(i)).map(|i| PLUGINS[i].name).collect();
        PyValueError::new_err(format!("profile: {name:?} is not a {point} plugin (known: {})", known.join(", ")))
    })
}

pub fn profile(d: &Bound<'_, PyDict>) -> PyResult<Profile> {
    const WHAT: &str = "profile";
    let fit_strategy = match value::<String>(WHAT, d, "fit_strategy")?.as_str() {
        "LeastAllocated" => Strategy::LeastAllocated,
        "MostAllocated" => Strategy::MostAllocated,
        "RequestedToCapacityRatio" => Strategy::RequestedToCapacityRatio(value(WHAT, d, "shape")?),
        other => return Err(PyValueError::new_err(format!("profile: unknown scoring strategy {other:?}"))),
    };
    let mut filter = [false; PLUGIN_COUNT];
    for name in value::<Vec<String>>(WHAT, d, "filters")? {
        filter[plugin(&name, "filter", |i| PLUGINS[i].filter)? as usize] = true;
    }
    let mut weight = [0i64; PLUGIN_COUNT];
    for (name, w) in value::<std::collections::HashMap<String, i64>>(WHAT, d, "weights")? {
        weight[plugin(&name, "score", |i| PLUGINS[i].score)? as usize] = w;
    }
    Ok(Profile {
        filter,
        weight,
        hard_pod_affinity_weight: value(WHAT, d, "hard_pod_affinity_weight")?,
        ignore_preferred_terms_of_existing_pods: value(WHAT, d, "ignore_preferred_terms_of_existing_pods")?,
        fit_strategy,
        fit_resources: value(WHAT, d, "fit_resources")?,
        fit_ignored: value(WHAT, d, "fit_ignored")?,
        balanced_resources: value(WHAT, d, "balanced_resources")?,
        preemption: value(WHAT, d, "preemption")?,
        max_pods_per_node: value(WHAT, d, "max_pods_per_node")?,
    })
}

/// `p` as the dict [`profile`] reads back into it: plugins by registry name (a weight of 0
/// is left out, as it scores nothing), and an empty shape unless the strategy has one.
pub fn profile_dict<'py>(py: Python<'py>, p: &Profile) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let filters: Vec<&str> = PLUGINS.iter().filter(|info| p.filters(info.id)).map(|info| info.name).collect();
    d.set_item("filters", filters)?;
    let weights = PyDict::new(py);
    for info in PLUGINS.iter().filter(|info| p.weight_of(info.id) != 0) {
        weights.set_item(info.name, p.weight_of(info.id))?;
    }
    d.set_item("weights", weights)?;
    d.set_item("hard_pod_affinity_weight", p.hard_pod_affinity_weight)?;
    d.set_item("ignore_preferred_terms_of_existing_pods", p.ignore_preferred_terms_of_existing_pods)?;
    let (strategy, shape) = match &p.fit_strategy {
        Strategy::LeastAllocated => ("LeastAllocated", Vec::new()),
        Strategy::MostAllocated => ("MostAllocated", Vec::new()),
        Strategy::RequestedToCapacityRatio(shape) => ("RequestedToCapacityRatio", shape.clone()),
    };
    d.set_item("fit_strategy", strategy)?;
    d.set_item("shape", shape)?;
    d.set_item("fit_resources", p.fit_resources.clone())?;
    d.set_item("fit_ignored", p.fit_ignored.clone())?;
    d.set_item("balanced_resources", p.balanced_resources.clone())?;
    d.set_item("preemption", p.preemption)?;
    d.set_item("max_pods_per_node", p.max_pods_per_node)?;
    Ok(d)
}

pub fn metric_specs(specs: &Bound<'_, PyList>) -> PyResult<Vec<MetricSpec>> {
    specs
        .iter()
        .map(|item| {
            let d = item
                .cast_into::<PyDict>()
                .map_err(|_| PyTypeError::new_err("metric_specs: each spec must be a dict"))?;
            const WHAT: &str = "metric spec";
            let prefer = match value::<String>(WHAT, &d, "prefer")?.as_str() {
                "lower" => Prefer::Lower,
                "higher" => Prefer::Higher,
                "target" => Prefer::Target(value(WHAT, &d, "target")?),
                other => return Err(PyValueError::new_err(format!("metric spec: unknown prefer {other:?}"))),
            };
            let missing = match value::<String>(WHAT, &d, "missing")?.as_str() {
                "neutral" => Missing::Neutral,
                "worst" => Missing::Worst,
                "exclude" => Missing::Exclude,
                other => return Err(PyValueError::new_err(format!("metric spec: unknown missing policy {other:?}"))),
            };
            Ok(MetricSpec {
                prefer,
                range: value(WHAT, &d, "range")?,
                above: value(WHAT, &d, "above")?,
                below: value(WHAT, &d, "below")?,
                missing,
                weight: value(WHAT, &d, "weight")?,
                estimate: value(WHAT, &d, "estimate")?,
            })
        })
        .collect()
}

pub fn outcome<'py>(py: Python<'py>, out: Outcome) -> PyResult<Bound<'py, PyDict>> {
    use numpy::PyArray1;
    let d = PyDict::new(py);
    d.set_item("nodes", PyArray1::from_vec(py, out.nodes))?;
    d.set_item("scores", PyArray1::from_vec(py, out.scores))?;
    d.set_item("feasible", PyArray1::from_vec(py, out.feasible))?;
    d.set_item("reason_offsets", PyArray1::from_vec(py, out.reason_offsets))?;
    d.set_item("reason_codes", PyArray1::from_vec(py, out.reason_codes))?;
    d.set_item("reason_counts", PyArray1::from_vec(py, out.reason_counts))?;
    d.set_item("nominated", PyArray1::from_vec(py, out.nominated))?;
    d.set_item("victim_offsets", PyArray1::from_vec(py, out.victim_offsets))?;
    d.set_item("victims", PyArray1::from_vec(py, out.victims))?;
    d.set_item("postfilter_pods", PyArray1::from_vec(py, out.postfilter_pods))?;
    d.set_item("postfilter_verdicts", PyArray1::from_vec(py, out.postfilter_verdicts))?;
    d.set_item("postfilter_offsets", PyArray1::from_vec(py, out.postfilter_offsets))?;
    d.set_item("postfilter_codes", PyArray1::from_vec(py, out.postfilter_codes))?;
    d.set_item("postfilter_counts", PyArray1::from_vec(py, out.postfilter_counts))?;
    d.set_item("volume_offsets", PyArray1::from_vec(py, out.volume_offsets))?;
    d.set_item("volumes", PyArray1::from_vec(py, out.volumes))?;
    d.set_item("threshold_offsets", PyArray1::from_vec(py, out.threshold_offsets))?;
    d.set_item("threshold_nodes", PyArray1::from_vec(py, out.threshold_nodes))?;
    d.set_item("threshold_codes", PyArray1::from_vec(py, out.threshold_codes))?;
    match out.explanation {
        Some(ex) => d.set_item("explanation", explanation(py, ex)?)?,
        None => d.set_item("explanation", py.None())?,
    }
    Ok(d)
}

fn explanation<'py>(py: Python<'py>, ex: Explanation) -> PyResult<Bound<'py, PyDict>> {
    use numpy::PyArray1;
    let d = PyDict::new(py);
    d.set_item("pod", ex.pod)?;
    d.set_item("reason_offsets", PyArray1::from_vec(py, ex.reason_offsets))?;
    d.set_item("reason_codes", PyArray1::from_vec(py, ex.reason_codes))?;
    d.set_item("plugins", ex.plugins)?;
    d.set_item("weights", PyArray1::from_vec(py, ex.weights))?;
    d.set_item("raw", PyArray1::from_vec(py, ex.raw))?;
    d.set_item("normalized", PyArray1::from_vec(py, ex.normalized))?;
    d.set_item("totals", PyArray1::from_vec(py, ex.totals))?;
    Ok(d)
}
