//! `ksched._core`: the engine, callable from Python.
//!
//! The one binding follows one pattern: borrow every input array as a slice
//! (convert.rs), release the GIL for the engine call, convert the results.

mod convert;
mod errors;

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use convert::{array, slice};
use ksched_core::{
    Classes, LabelSets, Labels, Metrics, Nodes, PodSelectors, PodTable, PodTerms, Pods, Ports, Preemption, Reservations, ScheduleOptions,
    Selectors, SpreadConstraints, Taints, TermSets, Tolerations, Victims,
};

/// Schedule one batch of pending pods against the node table.
///
/// Every argument is produced by `ksched.engine`; see `_core.pyi` for the keys.
#[pyfunction]
#[pyo3(signature = (nodes, classes, pods, metric_values, metric_specs, profile, *, seed=0, deadline_s=None, explain=None, parallel=true))]
#[allow(clippy::too_many_arguments)]
fn schedule<'py>(
    py: Python<'py>,
    nodes: &Bound<'py, PyDict>,
    classes: &Bound<'py, PyDict>,
    pods: &Bound<'py, PyDict>,
    metric_values: numpy::PyReadonlyArray1<'py, f64>,
    metric_specs: numpy::PyReadonlyArray1<'py, f64>,
    profile: &Bound<'py, PyDict>,
    seed: u64,
    deadline_s: Option<f64>,
    explain: Option<usize>,
    parallel: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let started = Instant::now();
    macro_rules! arrays {
        ($dict:ident { $($name:ident : $t:ty),* $(,)? }) => {
            $( let $name = array::<$t>($dict, stringify!($name))?; )*
        };
    }
    arrays!(nodes {
        allocatable: i64,
        requested: i64,
        nonzero_requested: i64,
        allowed_pods: i64,
        pod_count: i64,
        unschedulable: u8,
        names: i32,
        keys: u64,
        label_offsets: i64,
        label_keys: i32,
        label_values: i32,
        label_int_values: i64,
        label_int_valid: u8,
        taint_offsets: i64,
        taint_keys: i32,
        taint_values: i32,
        taint_effects: u8,
        port_offsets: i64,
        port_protocols: u8,
        port_ips: i32,
        port_ports: i32,
    });
    let n_count: usize = convert::value(nodes, "count")?;
    let resources: usize = convert::value(nodes, "resources")?;
    let strings: (i32, i32, i32) = convert::value(nodes, "strings")?;
    arrays!(classes {
        class_node_names: i32,
        tol_offsets: i64,
        tol_keys: i32,
        tol_operators: u8,
        tol_values: i32,
        tol_effects: u8,
        node_selector_term: i64,
        has_required: u8,
        required_offsets: i64,
        required_terms: i64,
        preferred_offsets: i64,
        preferred_terms: i64,
        has_prefilter: u8,
        prefilter_offsets: i64,
        prefilter_nodes: i64,
        term_offsets: i64,
        term_weights: i64,
        req_keys: i32,
        req_is_field: u8,
        req_operators: u8,
        req_value_offsets: i64,
        req_values: i32,
        req_int_values: i64,
    });
    let c_count: usize = convert::value(classes, "count")?;
    arrays!(pods {
        requests: i64,
        nonzero_requests: i64,
        pod_classes: i64,
        pod_keys: u64,
        hp_offsets: i64,
        hp_protocols: u8,
        hp_ips: i32,
        hp_ports: i32,
    });
    let p_count: usize = convert::value(pods, "count")?;
    let table_dict = match pods.get_item("table")? {
        Some(t) if !t.is_none() => Some(t.cast_into::<PyDict>()?),
        _ => None,
    };
    let empty = PyDict::new(py);
    let t = table_dict.as_ref().unwrap_or(&empty);
    let has_table = table_dict.is_some();
    macro_rules! table_arrays {
        ($($name:ident : $ty:ty),* $(,)?) => {
            $( let $name = if has_table { Some(array::<$ty>(t, stringify!($name))?) } else { None }; )*
        };
    }
    table_arrays!(
        pt_nodes: i64,
        pt_namespaces: i32,
        pt_label_sets: i64,
        pt_term_sets: i64,
        pt_terminating: u8,
        ls_offsets: i64,
        ls_keys: i32,
        ls_values: i32,
        sel_offsets: i64,
        sel_nothing: u8,
        sel_keys: i32,
        sel_operators: u8,
        sel_value_offsets: i64,
        sel_values: i32,
        term_selectors: i64,
        term_topology_keys: i32,
        term_weights_pod: i64,
        term_all_namespaces: u8,
        term_namespace_offsets: i64,
        term_namespaces: i32,
        ts_offsets: i64,
        ts_terms: i64,
        sp_offsets: i64,
        sp_max_skew: i64,
        sp_min_domains: i64,
        sp_topology_keys: i32,
        sp_hard: u8,
        sp_selectors: i64,
        sp_honor_affinity: u8,
        sp_honor_taints: u8,
        sp_system_default: u8,
    );
    macro_rules! s {
        ($name:ident) => {
            slice(stringify!($name), $name.as_ref().expect("table arrays are present"))?
        };
    }
    let table = if has_table {
        Some(PodTable {
            bound: convert::value(t, "bound")?,
            nodes: s!(pt_nodes),
            namespaces: s!(pt_namespaces),
            label_sets: s!(pt_label_sets),
            term_sets: s!(pt_term_sets),
            terminating: s!(pt_terminating),
            labels: LabelSets {
                offsets: s!(ls_offsets),
                keys: s!(ls_keys),
                values: s!(ls_values),
            },
            selectors: PodSelectors {
                offsets: s!(sel_offsets),
                nothing: s!(sel_nothing),
                keys: s!(sel_keys),
                operators: s!(sel_operators),
                value_offsets: s!(sel_value_offsets),
                values: s!(sel_values),
            },
            terms: PodTerms {
                selectors: s!(term_selectors),
                topology_keys: s!(term_topology_keys),
                weights: s!(term_weights_pod),
                all_namespaces: s!(term_all_namespaces),
                namespace_offsets: s!(term_namespace_offsets),
                namespaces: s!(term_namespaces),
            },
            term_set_table: TermSets {
                offsets: s!(ts_offsets),
                terms: s!(ts_terms),
            },
            spread: SpreadConstraints {
                offsets: s!(sp_offsets),
                max_skew: s!(sp_max_skew),
                min_domains: s!(sp_min_domains),
                topology_keys: s!(sp_topology_keys),
                hard: s!(sp_hard),
                selectors: s!(sp_selectors),
                honor_affinity: s!(sp_honor_affinity),
                honor_taints: s!(sp_honor_taints),
                system_default: s!(sp_system_default),
            },
            hostname_key: convert::value(t, "hostname_key")?,
        })
    } else {
        None
    };
    let profile = convert::profile(profile)?;
    let specs = convert::metric_specs(slice("metric_specs", &metric_specs)?)?;
    let node_view = Nodes {
        count: n_count,
        resources,
        allocatable: slice("allocatable", &allocatable)?,
        requested: slice("requested", &requested)?,
        nonzero_requested: slice("nonzero_requested", &nonzero_requested)?,
        allowed_pods: slice("allowed_pods", &allowed_pods)?,
        pod_count: slice("pod_count", &pod_count)?,
        unschedulable: slice("unschedulable", &unschedulable)?,
        names: slice("names", &names)?,
        keys: slice("keys", &keys)?,
        labels: Labels {
            offsets: slice("label_offsets", &label_offsets)?,
            keys: slice("label_keys", &label_keys)?,
            values: slice("label_values", &label_values)?,
            int_values: slice("label_int_values", &label_int_values)?,
            int_valid: slice("label_int_valid", &label_int_valid)?,
        },
        taints: Taints {
            offsets: slice("taint_offsets", &taint_offsets)?,
            keys: slice("taint_keys", &taint_keys)?,
            values: slice("taint_values", &taint_values)?,
            effects: slice("taint_effects", &taint_effects)?,
        },
        used_ports: Ports {
            offsets: slice("port_offsets", &port_offsets)?,
            protocols: slice("port_protocols", &port_protocols)?,
            ips: slice("port_ips", &port_ips)?,
            ports: slice("port_ports", &port_ports)?,
        },
        wildcard_ip: strings.0,
        unschedulable_key: strings.1,
        empty_string: strings.2,
    };
    let class_view = Classes {
        count: c_count,
        node_names: slice("class_node_names", &class_node_names)?,
        tolerations: Tolerations {
            offsets: slice("tol_offsets", &tol_offsets)?,
            keys: slice("tol_keys", &tol_keys)?,
            operators: slice("tol_operators", &tol_operators)?,
            values: slice("tol_values", &tol_values)?,
            effects: slice("tol_effects", &tol_effects)?,
        },
        node_selector_term: slice("node_selector_term", &node_selector_term)?,
        has_required: slice("has_required", &has_required)?,
        required_offsets: slice("required_offsets", &required_offsets)?,
        required_terms: slice("required_terms", &required_terms)?,
        preferred_offsets: slice("preferred_offsets", &preferred_offsets)?,
        preferred_terms: slice("preferred_terms", &preferred_terms)?,
        has_prefilter: slice("has_prefilter", &has_prefilter)?,
        prefilter_offsets: slice("prefilter_offsets", &prefilter_offsets)?,
        prefilter_nodes: slice("prefilter_nodes", &prefilter_nodes)?,
        selectors: Selectors {
            term_offsets: slice("term_offsets", &term_offsets)?,
            term_weights: slice("term_weights", &term_weights)?,
            keys: slice("req_keys", &req_keys)?,
            is_field: slice("req_is_field", &req_is_field)?,
            operators: slice("req_operators", &req_operators)?,
            value_offsets: slice("req_value_offsets", &req_value_offsets)?,
            values: slice("req_values", &req_values)?,
            int_values: slice("req_int_values", &req_int_values)?,
        },
    };
    let pre_dict = match pods.get_item("preemption")? {
        Some(t) if !t.is_none() => Some(t.cast_into::<PyDict>()?),
        _ => None,
    };
    let pre = pre_dict.as_ref().unwrap_or(&empty);
    let has_pre = pre_dict.is_some();
    macro_rules! pre_arrays {
        ($($name:ident : $ty:ty),* $(,)?) => {
            $( let $name = if has_pre { Some(array::<$ty>(pre, stringify!($name))?) } else { None }; )*
        };
    }
    pre_arrays!(
        pod_priorities: i64,
        pod_preempt: u8,
        pod_nominated: i64,
        v_rows: i64,
        v_nodes: i64,
        v_priorities: i64,
        v_requests: i64,
        v_start_times: i64,
        v_terminating: u8,
        v_port_offsets: i64,
        v_port_protocols: u8,
        v_port_ips: i32,
        v_port_ports: i32,
        v_pdb_offsets: i64,
        v_pdbs: i64,
        pdb_allowed: i64,
        r_nodes: i64,
        r_priorities: i64,
        r_requests: i64,
    );
    let preemption = if has_pre {
        Some(Preemption {
            priorities: s!(pod_priorities),
            allowed: s!(pod_preempt),
            nominated: s!(pod_nominated),
            victims: Victims {
                count: convert::value(pre, "victims")?,
                rows: s!(v_rows),
                nodes: s!(v_nodes),
                priorities: s!(v_priorities),
                requests: s!(v_requests),
                start_times: s!(v_start_times),
                terminating: s!(v_terminating),
                ports: Ports {
                    offsets: s!(v_port_offsets),
                    protocols: s!(v_port_protocols),
                    ips: s!(v_port_ips),
                    ports: s!(v_port_ports),
                },
                pdb_offsets: s!(v_pdb_offsets),
                pdbs: s!(v_pdbs),
                pdb_allowed: s!(pdb_allowed),
            },
            reservations: Reservations {
                nodes: s!(r_nodes),
                priorities: s!(r_priorities),
                requests: s!(r_requests),
            },
        })
    } else {
        None
    };
    let pod_view = Pods {
        count: p_count,
        requests: slice("requests", &requests)?,
        nonzero_requests: slice("nonzero_requests", &nonzero_requests)?,
        classes: slice("pod_classes", &pod_classes)?,
        keys: slice("pod_keys", &pod_keys)?,
        host_ports: Ports {
            offsets: slice("hp_offsets", &hp_offsets)?,
            protocols: slice("hp_protocols", &hp_protocols)?,
            ips: slice("hp_ips", &hp_ips)?,
            ports: slice("hp_ports", &hp_ports)?,
        },
        table,
        preemption,
    };
    let metrics = Metrics {
        values: slice("metric_values", &metric_values)?,
        specs,
    };
    let options = ScheduleOptions {
        seed,
        deadline: deadline_s.map(|s| started + Duration::from_secs_f64(s.max(0.0))),
        explain,
        parallel,
    };
    let result = py.detach(|| ksched_core::schedule_batch(&node_view, &class_view, &pod_view, &metrics, &profile, &options));
    convert::outcome(py, result.map_err(errors::to_py)?)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(schedule, m)?)?;
    m.add("EngineInputError", m.py().get_type::<errors::EngineInputError>())?;
    m.add("UNSCHEDULABLE", ksched_core::schedule::UNSCHEDULABLE)?;
    m.add("NOT_ATTEMPTED", ksched_core::schedule::NOT_ATTEMPTED)?;
    Ok(())
}
