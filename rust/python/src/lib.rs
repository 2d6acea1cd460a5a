//! `ksched._core`: the engine, callable from Python.
//!
//! The one binding follows one pattern: borrow every input array once
//! (`arrays.rs`), build the engine's views field by field (`views.rs`),
//! release the GIL for the engine call, convert the results (`convert.rs`).
//! The module also exports the engine's code tables (plugins, reasons, enum
//! values) so Python reads them instead of copying them, and decodes
//! Prometheus' instant-query answers for the metric refresh threads
//! (`prometheus.rs`), again with the GIL released, and the pod informer's
//! watch events straight into the projection it keeps (`watch.rs`).

mod arrays;
mod convert;
mod errors;
mod tables;
mod views;
mod watch;

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use arrays::Arrays;
use ksched_core::{Metrics, ScheduleOptions};
use ksched_wire::prometheus;

/// What one `schedule` call leaves for the next one given the same cache: the
/// engine's class and signature caches, reused only where the later call's
/// inputs show them valid (the result is always the one a call without a
/// cache gives). Calls sharing a cache run one at a time.
#[pyclass(frozen, module = "ksched._core")]
struct ScheduleCache {
    inner: Mutex<ksched_core::ScheduleCache>,
}

impl ScheduleCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, ksched_core::ScheduleCache> {
        // A call that panicked took what was kept out first: what is left is empty, not stale.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl ScheduleCache {
    #[new]
    fn new() -> Self {
        ScheduleCache {
            inner: Mutex::new(ksched_core::ScheduleCache::new()),
        }
    }

    /// Drop everything kept: the next call evaluates from scratch.
    fn clear(&self, py: Python<'_>) {
        py.detach(|| self.lock().clear());
    }

    /// How many signature caches are kept.
    #[getter]
    fn signatures(&self, py: Python<'_>) -> usize {
        py.detach(|| self.lock().signatures())
    }
}

/// Schedule one batch of pending pods against the node table.
///
/// The arguments are the TypedDicts of `ksched.core_types`, built by `ksched.engine`.
#[pyfunction]
#[pyo3(signature = (nodes, classes, pods, metric_values, metric_specs, profile, *, metric_load=None, seed=0, deadline_s=None, explain=None, parallel=true, cache=None, threshold_metrics=Vec::new()))]
#[allow(clippy::too_many_arguments)]
fn schedule<'py>(
    py: Python<'py>,
    nodes: &Bound<'py, PyDict>,
    classes: &Bound<'py, PyDict>,
    pods: &Bound<'py, PyDict>,
    metric_values: numpy::PyReadonlyArray1<'py, f64>,
    metric_specs: &Bound<'py, PyList>,
    profile: &Bound<'py, PyDict>,
    metric_load: Option<&Bound<'py, PyDict>>,
    seed: u64,
    deadline_s: Option<f64>,
    explain: Option<usize>,
    parallel: bool,
    cache: Option<&Bound<'py, ScheduleCache>>,
    threshold_metrics: Vec<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let started = Instant::now();
    let node_arrays = Arrays::new("nodes", nodes)?;
    let class_arrays = Arrays::new("classes", classes)?;
    let pod_arrays = Arrays::new("pods", pods)?;
    let table_arrays = pod_arrays.nested("pods[\"table\"]", "table")?;
    let preemption_arrays = pod_arrays.nested("pods[\"preemption\"]", "preemption")?;
    let volume_arrays = pod_arrays.nested("pods[\"volumes\"]", "volumes")?;
    let load_arrays = metric_load.map(|d| Arrays::new("metric_load", d)).transpose()?;
    let load = load_arrays.as_ref().map(views::metric_load).transpose()?;
    let node_view = views::nodes(&node_arrays)?;
    let class_view = views::classes(&class_arrays)?;
    let pod_view = views::pods(
        &pod_arrays,
        table_arrays.as_ref(),
        preemption_arrays.as_ref(),
        volume_arrays.as_ref(),
    )?;
    for arrays in [
        Some(&node_arrays),
        Some(&class_arrays),
        Some(&pod_arrays),
        table_arrays.as_ref(),
        preemption_arrays.as_ref(),
        volume_arrays.as_ref(),
        load_arrays.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        arrays.all_viewed()?;
    }
    let metrics = Metrics {
        values: metric_values
            .as_slice()
            .map_err(|_| pyo3::exceptions::PyTypeError::new_err("metric_values must be C-contiguous"))?,
        specs: convert::metric_specs(metric_specs)?,
        load,
    };
    let profile = convert::profile(profile)?;
    let options = ScheduleOptions {
        seed,
        deadline: deadline_s.map(|s| started + Duration::from_secs_f64(s.max(0.0))),
        explain,
        parallel,
        threshold_metrics,
    };
    let cache = cache.map(Bound::get);
    let result = py.detach(|| match cache {
        Some(c) => ksched_core::schedule_batch_cached(&node_view, &class_view, &pod_view, &metrics, &profile, &options, &mut c.lock()),
        None => ksched_core::schedule_batch(&node_view, &class_view, &pod_view, &metrics, &profile, &options),
    });
    convert::outcome(py, result.map_err(errors::to_py)?)
}

/// A Prometheus instant query's JSON answer as `(labels, values, oldest, not_finite)`: each
/// series' `label` value ("" where it has none) and value, finite values only; the oldest
/// sample time (None for an empty vector); how many series had a NaN or infinite value.
/// Raises ValueError, saying why, for an answer that is not an instant vector of numbers.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn decode_instant_vector(py: Python<'_>, body: &[u8], label: &str) -> PyResult<(Vec<String>, Vec<f64>, Option<f64>, usize)> {
    let decoded = py
        .detach(|| prometheus::decode(body, label))
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok((decoded.labels, decoded.values, decoded.oldest, decoded.not_finite))
}

/// A decoded pod watch event as Python receives it: the event's type, the object's
/// resourceVersion, the object's projection (`slim_pod`'s) and its Status fields (code, reason,
/// message).
type PodEvent<'py> = (
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
);

fn pod_event(event: Result<watch::Event<'_>, String>) -> PyResult<PodEvent<'_>> {
    let event = event.map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok((event.kind, event.version, event.slim, event.error))
}

/// One line of a JSON pod watch.
#[pyfunction]
fn decode_pod_event<'py>(py: Python<'py>, line: &[u8]) -> PyResult<PodEvent<'py>> {
    pod_event(watch::decode_pod_event(py, line))
}

/// One frame of a protobuf pod watch (its length prefix removed), read as `decode_pod_event`
/// reads a JSON line.
#[pyfunction]
fn decode_pod_frame<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<PodEvent<'py>> {
    pod_event(watch::decode_pod_frame(py, frame))
}

/// A page of a pod list as Python receives it: its items' projections, its `continue` token
/// and its resourceVersion.
type PodPage<'py> = (Bound<'py, PyList>, Option<Bound<'py, PyAny>>, Option<Bound<'py, PyAny>>);

/// One page of a JSON pod list, each item as `decode_pod_event` projects a pod.
#[pyfunction]
fn decode_pod_list<'py>(py: Python<'py>, body: &[u8]) -> PyResult<PodPage<'py>> {
    let page = watch::decode_pod_list(py, body).map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok((page.items, page.next, page.version))
}

/// One page of a protobuf pod list (asked with `Accept: application/vnd.kubernetes.protobuf`),
/// read as `decode_pod_list` reads a JSON page.
#[pyfunction]
fn decode_pod_list_proto<'py>(py: Python<'py>, body: &[u8]) -> PyResult<PodPage<'py>> {
    let page = watch::decode_pod_list_proto(py, body).map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok((page.items, page.next, page.version))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(schedule, m)?)?;
    m.add_function(wrap_pyfunction!(decode_instant_vector, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pod_event, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pod_frame, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pod_list, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pod_list_proto, m)?)?;
    m.add_class::<ScheduleCache>()?;
    m.add("EngineInputError", m.py().get_type::<errors::EngineInputError>())?;
    let projection = PyDict::new(m.py());
    for (part, fields) in [
        ("metadata", ksched_wire::projection::POD_META),
        ("spec", ksched_wire::projection::POD_SPEC),
        ("conditions", ksched_wire::projection::POD_CONDITIONS),
        ("container", ksched_wire::projection::CONTAINER),
    ] {
        projection.set_item(part, PyList::new(m.py(), fields)?)?;
    }
    m.add("POD_PROJECTION", projection)?;
    tables::add(m)
}
