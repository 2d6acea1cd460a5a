//! The engine's code tables, exported so Python reads them instead of copying them.
//!
//! `PLUGINS` (registry order, extension points, default weights and whether the
//! default-equivalent profile runs it, the cluster
//! events each registers), `CLUSTER_EVENTS` (every event name), `REASONS`
//! (fixed filter-failure reasons: code, plugin, upstream's string) with
//! `REASON_LAYOUT` for the parameterized ones, and the enum values the input
//! tables use (`EFFECTS`, `TOLERATION_OPERATORS`, `SELECTOR_OPERATORS`,
//! `POD_SELECTOR_OPERATORS`, `PROTOCOLS`, `VOLUME_CODES`), and DefaultPreemption's
//! verdicts and pseudo reason codes (`POSTFILTER_CODES`), the metric filter's
//! exemption codes in `MetricLoad["exempt"]` (`METRIC_EXEMPT`,
//! `METRIC_POD_THRESHOLDS`, `METRIC_STRICTER_THRESHOLDS`); and `DEFAULT_PROFILE`, the
//! engine's default profile (`Profile::default`, its own tests' fixture), which Python's
//! defaults are tested against. Types: `ksched.core_types`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::convert;
use ksched_core::reasons::FIXED_REASONS;
use ksched_core::registry::PLUGINS;
use ksched_core::{model, reasons, Profile};

fn names<'py>(py: Python<'py>, table: &[(&str, u8)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for &(name, code) in table {
        d.set_item(name, code)?;
    }
    Ok(d)
}

pub fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let plugins = PyList::empty(py);
    for p in &PLUGINS {
        let d = PyDict::new(py);
        d.set_item("name", p.name)?;
        d.set_item("filter", p.filter)?;
        d.set_item("score", p.score)?;
        d.set_item("default_weight", p.default_weight)?;
        d.set_item("default_enabled", p.default_enabled)?;
        d.set_item("events", p.events.iter().map(|e| e.name()).collect::<Vec<_>>())?;
        plugins.append(d)?;
    }
    m.add("PLUGINS", plugins)?;
    m.add("CLUSTER_EVENTS", model::ClusterEvent::ALL.map(|e| e.name()).to_vec())?;
    let fixed = PyList::empty(py);
    for r in FIXED_REASONS {
        let d = PyDict::new(py);
        d.set_item("code", r.code)?;
        d.set_item("plugin", PLUGINS[r.plugin as usize].name)?;
        d.set_item("message", r.message)?;
        fixed.append(d)?;
    }
    m.add("REASONS", fixed)?;
    let layout = PyDict::new(py);
    layout.set_item("first_insufficient", reasons::FIRST_INSUFFICIENT)?;
    layout.set_item("per_metric", reasons::PER_METRIC)?;
    layout.set_item("metric_above", reasons::METRIC_ABOVE)?;
    layout.set_item("metric_below", reasons::METRIC_BELOW)?;
    layout.set_item("metric_missing", reasons::METRIC_MISSING)?;
    m.add("REASON_LAYOUT", layout)?;
    m.add("EFFECTS", names(py, &model::EFFECTS)?)?;
    m.add("TOLERATION_OPERATORS", names(py, &model::TOLERATION_OPERATORS)?)?;
    m.add("SELECTOR_OPERATORS", names(py, &model::SELECTOR_OPERATORS)?)?;
    m.add("POD_SELECTOR_OPERATORS", names(py, &model::POD_SELECTOR_OPERATORS)?)?;
    m.add("PROTOCOLS", names(py, &model::PROTOCOLS)?)?;
    m.add("UNSCHEDULABLE", ksched_core::UNSCHEDULABLE)?;
    m.add("NOT_ATTEMPTED", ksched_core::NOT_ATTEMPTED)?;
    let volumes = PyDict::new(py);
    volumes.set_item("unbound", model::UNBOUND)?;
    volumes.set_item("missing_pv", model::MISSING_PV)?;
    volumes.set_item("no_selected_node", model::NO_SELECTED_NODE)?;
    volumes.set_item("unknown_node", model::UNKNOWN_NODE)?;
    volumes.set_item("provision", ksched_core::plugins::volume_binding::PROVISION)?;
    m.add("VOLUME_CODES", volumes)?;
    m.add("METRIC_EXEMPT", model::METRIC_EXEMPT)?;
    m.add("METRIC_POD_THRESHOLDS", model::METRIC_POD_THRESHOLDS)?;
    m.add("METRIC_STRICTER_THRESHOLDS", model::METRIC_STRICTER_THRESHOLDS)?;
    {
        use ksched_core::plugins::default_preemption::{verdict, NOT_HELPFUL, NO_VICTIMS};
        let pre = PyDict::new(py);
        pre.set_item("nominated", verdict::NOMINATED)?;
        pre.set_item("never", verdict::NEVER)?;
        pre.set_item("terminating", verdict::TERMINATING)?;
        pre.set_item("no_candidate", verdict::NO_CANDIDATE)?;
        pre.set_item("not_helpful", NOT_HELPFUL)?;
        pre.set_item("no_victims", NO_VICTIMS)?;
        m.add("POSTFILTER_CODES", pre)?;
    }
    m.add("DEFAULT_PROFILE", convert::profile_dict(py, &Profile::default())?)?;
    Ok(())
}
