//! The engine's input views, built from the borrowed arrays field by field.
//!
//! Each array is named once, where its engine field is filled; the names are
//! the keys of `ksched.core_types` (NodeTable, ClassTable, PodBatch, ...).

use pyo3::prelude::*;

use crate::arrays::Arrays;
use ksched_core::{
    Classes, Images, LabelSets, Labels, LoadInputs, Nodes, PodImages, PodSelectors, PodTable, PodTerms, Pods, Ports, Preemption,
    Reservations, Selectors, SpreadConstraints, Taints, TermSets, Tolerations, Victims, Volumes,
};

pub fn nodes<'a>(a: &'a Arrays) -> PyResult<Nodes<'a>> {
    let (wildcard_ip, unschedulable_key, empty_string): (i32, i32, i32) = a.value("strings")?;
    Ok(Nodes {
        count: a.value("count")?,
        resources: a.value("resources")?,
        allocatable: a.slice("allocatable")?,
        requested: a.slice("requested")?,
        nonzero_requested: a.slice("nonzero_requested")?,
        allowed_pods: a.slice("allowed_pods")?,
        pod_count: a.slice("pod_count")?,
        unschedulable: a.slice("unschedulable")?,
        names: a.slice("names")?,
        keys: a.slice("keys")?,
        labels: Labels {
            offsets: a.slice("label_offsets")?,
            keys: a.slice("label_keys")?,
            values: a.slice("label_values")?,
            int_values: a.slice("label_int_values")?,
            int_valid: a.slice("label_int_valid")?,
        },
        taints: Taints {
            offsets: a.slice("taint_offsets")?,
            keys: a.slice("taint_keys")?,
            values: a.slice("taint_values")?,
            effects: a.slice("taint_effects")?,
        },
        used_ports: Ports {
            offsets: a.slice("port_offsets")?,
            protocols: a.slice("port_protocols")?,
            ips: a.slice("port_ips")?,
            ports: a.slice("port_ports")?,
        },
        images: Images {
            offsets: a.slice("image_offsets")?,
            ids: a.slice("image_ids")?,
            sizes: a.slice("image_sizes")?,
            node_counts: a.slice("image_node_counts")?,
        },
        wildcard_ip,
        unschedulable_key,
        empty_string,
    })
}

pub fn classes<'a>(a: &'a Arrays) -> PyResult<Classes<'a>> {
    Ok(Classes {
        count: a.value("count")?,
        node_names: a.slice("class_node_names")?,
        tolerations: Tolerations {
            offsets: a.slice("tol_offsets")?,
            keys: a.slice("tol_keys")?,
            operators: a.slice("tol_operators")?,
            values: a.slice("tol_values")?,
            effects: a.slice("tol_effects")?,
        },
        node_selector_term: a.slice("node_selector_term")?,
        has_required: a.slice("has_required")?,
        required_offsets: a.slice("required_offsets")?,
        required_terms: a.slice("required_terms")?,
        preferred_offsets: a.slice("preferred_offsets")?,
        preferred_terms: a.slice("preferred_terms")?,
        has_prefilter: a.slice("has_prefilter")?,
        prefilter_offsets: a.slice("prefilter_offsets")?,
        prefilter_nodes: a.slice("prefilter_nodes")?,
        enforced_terms: a.slice("enforced_terms")?,
        selectors: Selectors {
            term_offsets: a.slice("term_offsets")?,
            term_weights: a.slice("term_weights")?,
            keys: a.slice("req_keys")?,
            is_field: a.slice("req_is_field")?,
            operators: a.slice("req_operators")?,
            value_offsets: a.slice("req_value_offsets")?,
            values: a.slice("req_values")?,
            int_values: a.slice("req_int_values")?,
        },
    })
}

pub fn pods<'a>(
    a: &'a Arrays,
    table: Option<&'a Arrays>,
    preemption: Option<&'a Arrays>,
    volumes: Option<&'a Arrays>,
) -> PyResult<Pods<'a>> {
    Ok(Pods {
        count: a.value("count")?,
        requests: a.slice("requests")?,
        nonzero_requests: a.slice("nonzero_requests")?,
        classes: a.slice("pod_classes")?,
        keys: a.slice("pod_keys")?,
        host_ports: Ports {
            offsets: a.slice("hp_offsets")?,
            protocols: a.slice("hp_protocols")?,
            ips: a.slice("hp_ips")?,
            ports: a.slice("hp_ports")?,
        },
        images: PodImages {
            offsets: a.slice("img_offsets")?,
            ids: a.slice("img_ids")?,
            containers: a.slice("img_containers")?,
        },
        table: table.map(pod_table).transpose()?,
        preemption: preemption.map(self::preemption).transpose()?,
        volumes: volumes.map(self::volumes).transpose()?,
    })
}

fn volumes<'a>(v: &'a Arrays) -> PyResult<Volumes<'a>> {
    Ok(Volumes {
        pvs: v.value("pvs")?,
        pv_has_affinity: v.slice("pv_has_affinity")?,
        pv_term_offsets: v.slice("pv_term_offsets")?,
        pv_terms: v.slice("pv_terms")?,
        claim_offsets: v.slice("claim_offsets")?,
        claim_pvs: v.slice("claim_pvs")?,
        claim_selected_nodes: v.slice("claim_selected_nodes")?,
        candidate_offsets: v.slice("candidate_offsets")?,
        candidates: v.slice("candidates")?,
        provisionable: v.slice("provisionable")?,
        topology_offsets: v.slice("topology_offsets")?,
        topology_terms: v.slice("topology_terms")?,
        zone_label_keys: v.slice("zone_label_keys")?,
        zone_offsets: v.slice("zone_offsets")?,
        zone_keys: v.slice("zone_keys")?,
        zone_alt_keys: v.slice("zone_alt_keys")?,
        zone_value_offsets: v.slice("zone_value_offsets")?,
        zone_values: v.slice("zone_values")?,
        rwop_offsets: v.slice("rwop_offsets")?,
        rwop_claims: v.slice("rwop_claims")?,
        rwop_user_offsets: v.slice("rwop_user_offsets")?,
        rwop_users: v.slice("rwop_users")?,
        limit_offsets: v.slice("limit_offsets")?,
        limit_drivers: v.slice("limit_drivers")?,
        limit_counts: v.slice("limit_counts")?,
        attached_offsets: v.slice("attached_offsets")?,
        attached_volumes: v.slice("attached_volumes")?,
        attached_drivers: v.slice("attached_drivers")?,
        attach_offsets: v.slice("attach_offsets")?,
        attach_volumes: v.slice("attach_volumes")?,
        attach_drivers: v.slice("attach_drivers")?,
    })
}

fn pod_table<'a>(t: &'a Arrays) -> PyResult<PodTable<'a>> {
    Ok(PodTable {
        bound: t.value("bound")?,
        nodes: t.slice("pt_nodes")?,
        namespaces: t.slice("pt_namespaces")?,
        label_sets: t.slice("pt_label_sets")?,
        term_sets: t.slice("pt_term_sets")?,
        terminating: t.slice("pt_terminating")?,
        labels: LabelSets {
            offsets: t.slice("ls_offsets")?,
            keys: t.slice("ls_keys")?,
            values: t.slice("ls_values")?,
        },
        selectors: PodSelectors {
            offsets: t.slice("sel_offsets")?,
            nothing: t.slice("sel_nothing")?,
            keys: t.slice("sel_keys")?,
            operators: t.slice("sel_operators")?,
            value_offsets: t.slice("sel_value_offsets")?,
            values: t.slice("sel_values")?,
        },
        terms: PodTerms {
            selectors: t.slice("term_selectors")?,
            topology_keys: t.slice("term_topology_keys")?,
            weights: t.slice("term_weights_pod")?,
            all_namespaces: t.slice("term_all_namespaces")?,
            namespace_offsets: t.slice("term_namespace_offsets")?,
            namespaces: t.slice("term_namespaces")?,
        },
        term_set_table: TermSets {
            offsets: t.slice("ts_offsets")?,
            terms: t.slice("ts_terms")?,
        },
        spread: SpreadConstraints {
            offsets: t.slice("sp_offsets")?,
            max_skew: t.slice("sp_max_skew")?,
            min_domains: t.slice("sp_min_domains")?,
            topology_keys: t.slice("sp_topology_keys")?,
            hard: t.slice("sp_hard")?,
            selectors: t.slice("sp_selectors")?,
            honor_affinity: t.slice("sp_honor_affinity")?,
            honor_taints: t.slice("sp_honor_taints")?,
            system_default: t.slice("sp_system_default")?,
        },
        hostname_key: t.value("hostname_key")?,
    })
}

fn preemption<'a>(p: &'a Arrays) -> PyResult<Preemption<'a>> {
    Ok(Preemption {
        priorities: p.slice("pod_priorities")?,
        allowed: p.slice("pod_preempt")?,
        nominated: p.slice("pod_nominated")?,
        victims: Victims {
            count: p.value("victims")?,
            rows: p.slice("v_rows")?,
            nodes: p.slice("v_nodes")?,
            priorities: p.slice("v_priorities")?,
            requests: p.slice("v_requests")?,
            start_times: p.slice("v_start_times")?,
            terminating: p.slice("v_terminating")?,
            ports: Ports {
                offsets: p.slice("v_port_offsets")?,
                protocols: p.slice("v_port_protocols")?,
                ips: p.slice("v_port_ips")?,
                ports: p.slice("v_port_ports")?,
            },
            pdb_offsets: p.slice("v_pdb_offsets")?,
            pdbs: p.slice("v_pdbs")?,
            pdb_allowed: p.slice("pdb_allowed")?,
        },
        reservations: Reservations {
            nodes: p.slice("r_nodes")?,
            rows: p.slice("r_rows")?,
            priorities: p.slice("r_priorities")?,
            requests: p.slice("r_requests")?,
            ports: Ports {
                offsets: p.slice("r_port_offsets")?,
                protocols: p.slice("r_port_protocols")?,
                ips: p.slice("r_port_ips")?,
                ports: p.slice("r_port_ports")?,
            },
        },
    })
}

/// `MetricLoad`: load estimate v2's per-pod and per-node inputs.
pub fn metric_load<'a>(a: &'a Arrays) -> PyResult<LoadInputs<'a>> {
    Ok(LoadInputs {
        incoming: a.value("incoming")?,
        risk: a.value("risk")?,
        amounts: a.slice("amounts")?,
        expected: a.slice("expected")?,
        pod_above: a.slice("pod_above")?,
        pod_below: a.slice("pod_below")?,
        exempt: a.slice("exempt")?,
        node_above: a.slice("node_above")?,
        node_below: a.slice("node_below")?,
        caution: a.slice("caution")?,
        scores_caution: a.value("scores_caution")?,
    })
}
