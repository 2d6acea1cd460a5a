//! Python -> engine views and engine results -> Python, written once.
//!
//! Inputs arrive as dicts of 1-D numpy arrays; every array is borrowed
//! read-only and viewed as a slice (no copy). Results go back as new arrays.

use numpy::{Element, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use ksched_core::{Explanation, MetricSpec, Missing, Outcome, PluginId, Prefer, Profile, Strategy, PLUGIN_COUNT};

/// Borrow `dict[key]` as a read-only 1-D array of `T`.
pub fn array<'py, T: Element>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<PyReadonlyArray1<'py, T>> {
    let item = dict
        .get_item(key)?
        .ok_or_else(|| PyKeyError::new_err(format!("missing array {key:?}")))?;
    item.extract::<PyReadonlyArray1<'py, T>>().map_err(|e| {
        PyTypeError::new_err(format!(
            "array {key:?} must be a 1-D contiguous numpy array of {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// View a borrowed array as a slice.
pub fn slice<'a, T: Element>(key: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyTypeError::new_err(format!("array {key:?} must be C-contiguous")))
}

pub fn value<'py, T: FromPyObjectOwned<'py>>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    let item = dict
        .get_item(key)?
        .ok_or_else(|| PyKeyError::new_err(format!("missing key {key:?}")))?;
    item.extract::<T>()
        .map_err(|e| PyTypeError::new_err(format!("{key:?}: {}", Into::<PyErr>::into(e))))
}

use pyo3::conversion::FromPyObjectOwned;

pub fn profile(dict: &Bound<'_, PyDict>) -> PyResult<Profile> {
    let strategy = match value::<String>(dict, "fit_strategy")?.as_str() {
        "LeastAllocated" => Strategy::LeastAllocated,
        "MostAllocated" => Strategy::MostAllocated,
        "RequestedToCapacityRatio" => Strategy::RequestedToCapacityRatio(value(dict, "shape")?),
        other => return Err(PyTypeError::new_err(format!("unknown scoring strategy {other:?}"))),
    };
    let filters: Vec<bool> = value(dict, "filters")?;
    // The caller's filter switches, in upstream's filter order.
    const FILTERS: [PluginId; 8] = [
        PluginId::NodeUnschedulable,
        PluginId::NodeName,
        PluginId::TaintToleration,
        PluginId::NodeAffinity,
        PluginId::NodePorts,
        PluginId::NodeResourcesFit,
        PluginId::PodTopologySpread,
        PluginId::InterPodAffinity,
    ];
    if filters.len() != FILTERS.len() {
        return Err(PyTypeError::new_err("filters must list 8 flags"));
    }
    let mut filter = [false; PLUGIN_COUNT];
    for (id, on) in FILTERS.into_iter().zip(filters) {
        filter[id as usize] = on;
    }
    let mut weight = [0; PLUGIN_COUNT];
    for (id, key) in [
        (PluginId::TaintToleration, "taint_toleration_weight"),
        (PluginId::NodeAffinity, "node_affinity_weight"),
        (PluginId::NodeResourcesFit, "fit_weight"),
        (PluginId::NodeResourcesBalancedAllocation, "balanced_weight"),
        (PluginId::InterPodAffinity, "inter_pod_affinity_weight"),
        (PluginId::PodTopologySpread, "pod_topology_spread_weight"),
    ] {
        weight[id as usize] = value(dict, key)?;
    }
    Ok(Profile {
        filter,
        weight,
        hard_pod_affinity_weight: value(dict, "hard_pod_affinity_weight")?,
        fit_strategy: strategy,
        fit_resources: value(dict, "fit_resources")?,
        balanced_resources: value(dict, "balanced_resources")?,
        preemption: value(dict, "preemption")?,
    })
}

fn optional(x: f64) -> Option<f64> {
    if x.is_nan() {
        None
    } else {
        Some(x)
    }
}

/// Metric specs as rows of 10 floats:
/// prefer (0 lower, 1 higher, 2 target), target, range low, range high,
/// above, below (NaN for none), missing (0 neutral, 1 worst, 2 exclude), weight,
/// herd resource column (negative for none), herd factor.
const METRIC_SPEC_WIDTH: usize = 10;

pub fn metric_specs(flat: &[f64]) -> PyResult<Vec<MetricSpec>> {
    if flat.len() % METRIC_SPEC_WIDTH != 0 {
        return Err(PyTypeError::new_err("metric specs must be rows of 10 numbers"));
    }
    flat.chunks(METRIC_SPEC_WIDTH)
        .map(|r| {
            let prefer = match r[0] as i64 {
                0 => Prefer::Lower,
                1 => Prefer::Higher,
                2 => Prefer::Target(r[1]),
                k => return Err(PyTypeError::new_err(format!("unknown prefer kind {k}"))),
            };
            let missing = match r[6] as i64 {
                0 => Missing::Neutral,
                1 => Missing::Worst,
                2 => Missing::Exclude,
                k => return Err(PyTypeError::new_err(format!("unknown missing policy {k}"))),
            };
            let range = match (optional(r[2]), optional(r[3])) {
                (Some(lo), Some(hi)) => Some((lo, hi)),
                _ => None,
            };
            Ok(MetricSpec {
                prefer,
                range,
                above: optional(r[4]),
                below: optional(r[5]),
                missing,
                weight: r[7],
                herd: (r[8] >= 0.0).then_some((r[8] as usize, r[9])),
            })
        })
        .collect()
}

pub fn outcome<'py>(py: Python<'py>, out: Outcome) -> PyResult<Bound<'py, PyDict>> {
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
    match out.explanation {
        Some(ex) => d.set_item("explanation", explanation(py, ex)?)?,
        None => d.set_item("explanation", py.None())?,
    }
    Ok(d)
}

fn explanation<'py>(py: Python<'py>, ex: Explanation) -> PyResult<Bound<'py, PyDict>> {
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
