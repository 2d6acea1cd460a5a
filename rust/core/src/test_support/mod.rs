//! Owned fixtures for the table-driven tests: build small clusters as plain
//! vectors and borrow them as the engine's input views. The one place tests
//! build inputs; test modules add only their own named cases.

mod pod_table;
mod victims;

pub use pod_table::*;
pub use victims::*;

use crate::model::*;
use crate::plugins::FEASIBLE;
use crate::schedule::{schedule_batch, Explanation, Outcome, ScheduleOptions};

/// Label (key, value, parsed int) of a test node.
pub type TestLabel = (i32, i32, Option<i64>);

#[derive(Clone)]
pub struct TestNode {
    pub name: i32,
    pub allocatable: Vec<i64>,
    pub requested: Vec<i64>,
    pub nonzero_requested: [i64; 2],
    pub allowed_pods: i64,
    pub pod_count: i64,
    pub unschedulable: bool,
    pub labels: Vec<TestLabel>,
    pub taints: Vec<(i32, i32, u8)>,
    pub ports: Vec<(u8, i32, i32)>,
}

pub struct NodeBuilder {
    pub resources: usize,
    pub nodes: Vec<TestNode>,
    pub wildcard_ip: i32,
    pub unschedulable_key: i32,
    pub empty_string: i32,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            resources: 4,
            nodes: Vec::new(),
            wildcard_ip: 1,
            unschedulable_key: 2,
            empty_string: 0,
        }
    }
}

impl NodeBuilder {
    pub fn node(&mut self, f: impl FnOnce(&mut TestNode)) -> &mut Self {
        let mut allocatable = vec![0; self.resources];
        allocatable[CPU] = 4000;
        allocatable[MEMORY] = 8 << 30;
        allocatable[EPHEMERAL_STORAGE] = 100 << 30;
        let mut n = TestNode {
            name: 1000 + self.nodes.len() as i32,
            allocatable,
            requested: vec![0; self.resources],
            nonzero_requested: [0, 0],
            allowed_pods: 110,
            pod_count: 0,
            unschedulable: false,
            labels: Vec::new(),
            taints: Vec::new(),
            ports: Vec::new(),
        };
        f(&mut n);
        n.labels.sort_by_key(|l| l.0);
        self.nodes.push(n);
        self
    }

    pub fn build(&self) -> OwnedNodes {
        let mut o = OwnedNodes {
            count: self.nodes.len(),
            resources: self.resources,
            wildcard_ip: self.wildcard_ip,
            unschedulable_key: self.unschedulable_key,
            empty_string: self.empty_string,
            label_offsets: vec![0],
            taint_offsets: vec![0],
            port_offsets: vec![0],
            ..OwnedNodes::default()
        };
        for n in &self.nodes {
            o.allocatable.extend(&n.allocatable);
            o.requested.extend(&n.requested);
            o.nonzero_requested.extend(n.nonzero_requested);
            o.allowed_pods.push(n.allowed_pods);
            o.pod_count.push(n.pod_count);
            o.unschedulable.push(n.unschedulable as u8);
            o.names.push(n.name);
            o.keys.push(n.name as u64);
            for &(k, v, i) in &n.labels {
                o.label_keys.push(k);
                o.label_values.push(v);
                o.label_ints.push(i.unwrap_or(0));
                o.label_int_valid.push(i.is_some() as u8);
            }
            o.label_offsets.push(o.label_keys.len() as i64);
            for &(k, v, e) in &n.taints {
                o.taint_keys.push(k);
                o.taint_values.push(v);
                o.taint_effects.push(e);
            }
            o.taint_offsets.push(o.taint_keys.len() as i64);
            for &(p, ip, port) in &n.ports {
                o.port_protocols.push(p);
                o.port_ips.push(ip);
                o.port_ports.push(port);
            }
            o.port_offsets.push(o.port_ports.len() as i64);
        }
        o
    }
}

#[derive(Default)]
pub struct OwnedNodes {
    pub count: usize,
    pub resources: usize,
    pub wildcard_ip: i32,
    pub unschedulable_key: i32,
    pub empty_string: i32,
    pub allocatable: Vec<i64>,
    pub requested: Vec<i64>,
    pub nonzero_requested: Vec<i64>,
    pub allowed_pods: Vec<i64>,
    pub pod_count: Vec<i64>,
    pub unschedulable: Vec<u8>,
    pub names: Vec<i32>,
    pub keys: Vec<u64>,
    pub label_offsets: Vec<i64>,
    pub label_keys: Vec<i32>,
    pub label_values: Vec<i32>,
    pub label_ints: Vec<i64>,
    pub label_int_valid: Vec<u8>,
    pub taint_offsets: Vec<i64>,
    pub taint_keys: Vec<i32>,
    pub taint_values: Vec<i32>,
    pub taint_effects: Vec<u8>,
    pub port_offsets: Vec<i64>,
    pub port_protocols: Vec<u8>,
    pub port_ips: Vec<i32>,
    pub port_ports: Vec<i32>,
}

impl OwnedNodes {
    pub fn view(&self) -> Nodes<'_> {
        Nodes {
            count: self.count,
            resources: self.resources,
            allocatable: &self.allocatable,
            requested: &self.requested,
            nonzero_requested: &self.nonzero_requested,
            allowed_pods: &self.allowed_pods,
            pod_count: &self.pod_count,
            unschedulable: &self.unschedulable,
            names: &self.names,
            keys: &self.keys,
            labels: Labels {
                offsets: &self.label_offsets,
                keys: &self.label_keys,
                values: &self.label_values,
                int_values: &self.label_ints,
                int_valid: &self.label_int_valid,
            },
            taints: Taints {
                offsets: &self.taint_offsets,
                keys: &self.taint_keys,
                values: &self.taint_values,
                effects: &self.taint_effects,
            },
            used_ports: Ports {
                offsets: &self.port_offsets,
                protocols: &self.port_protocols,
                ips: &self.port_ips,
                ports: &self.port_ports,
            },
            wildcard_ip: self.wildcard_ip,
            unschedulable_key: self.unschedulable_key,
            empty_string: self.empty_string,
        }
    }
}

pub struct OwnedTolerations {
    offsets: Vec<i64>,
    keys: Vec<i32>,
    operators: Vec<u8>,
    values: Vec<i32>,
    effects: Vec<u8>,
}

impl OwnedTolerations {
    /// One list of (key, operator, value, effect) per class.
    pub fn new(classes: Vec<Vec<(i32, u8, i32, u8)>>) -> Self {
        let mut o = OwnedTolerations {
            offsets: vec![0],
            keys: vec![],
            operators: vec![],
            values: vec![],
            effects: vec![],
        };
        for class in classes {
            for (k, op, v, e) in class {
                o.keys.push(k);
                o.operators.push(op);
                o.values.push(v);
                o.effects.push(e);
            }
            o.offsets.push(o.keys.len() as i64);
        }
        o
    }

    pub fn view(&self) -> Tolerations<'_> {
        Tolerations {
            offsets: &self.offsets,
            keys: &self.keys,
            operators: &self.operators,
            values: &self.values,
            effects: &self.effects,
        }
    }
}

pub struct OwnedPorts {
    offsets: Vec<i64>,
    protocols: Vec<u8>,
    ips: Vec<i32>,
    ports: Vec<i32>,
}

impl OwnedPorts {
    pub fn new(rows: Vec<Vec<(u8, i32, i32)>>) -> Self {
        let mut o = OwnedPorts {
            offsets: vec![0],
            protocols: vec![],
            ips: vec![],
            ports: vec![],
        };
        for r in rows {
            for (p, ip, port) in r {
                o.protocols.push(p);
                o.ips.push(ip);
                o.ports.push(port);
            }
            o.offsets.push(o.ports.len() as i64);
        }
        o
    }

    pub fn view(&self) -> Ports<'_> {
        Ports {
            offsets: &self.offsets,
            protocols: &self.protocols,
            ips: &self.ips,
            ports: &self.ports,
        }
    }
}

/// A node selector requirement for test classes.
#[derive(Clone, Debug)]
pub enum Req {
    In(i32, Vec<i32>),
    NotIn(i32, Vec<i32>),
    Exists(i32),
    DoesNotExist(i32),
    Gt(i32, i64),
    Lt(i32, i64),
    NameIn(Vec<i32>),
    NameNotIn(Vec<i32>),
}

#[derive(Clone, Default)]
pub struct TestClass {
    pub node_name: Option<i32>,
    pub tolerations: Vec<(i32, u8, i32, u8)>,
    pub node_selector: Option<Vec<Req>>,
    pub required: Option<Vec<Vec<Req>>>,
    pub preferred: Vec<(i64, Vec<Req>)>,
    pub prefilter: Option<Vec<i64>>,
}

#[derive(Default)]
pub struct OwnedClasses {
    pub classes: Vec<TestClass>,
    built: Option<BuiltClasses>,
}

#[derive(Default)]
struct BuiltClasses {
    tolerations: Option<OwnedTolerations>,
    node_names: Vec<i32>,
    node_selector_term: Vec<i64>,
    has_required: Vec<u8>,
    required_offsets: Vec<i64>,
    required_terms: Vec<i64>,
    preferred_offsets: Vec<i64>,
    preferred_terms: Vec<i64>,
    has_prefilter: Vec<u8>,
    prefilter_offsets: Vec<i64>,
    prefilter_nodes: Vec<i64>,
    term_offsets: Vec<i64>,
    term_weights: Vec<i64>,
    keys: Vec<i32>,
    is_field: Vec<u8>,
    operators: Vec<u8>,
    value_offsets: Vec<i64>,
    values: Vec<i32>,
    int_values: Vec<i64>,
}

impl BuiltClasses {
    fn add_term(&mut self, weight: i64, reqs: &[Req]) -> i64 {
        for req in reqs {
            let (key, field, op, values, int) = match req.clone() {
                Req::In(k, v) => (k, 0, OP_IN, v, 0),
                Req::NotIn(k, v) => (k, 0, OP_NOT_IN, v, 0),
                Req::Exists(k) => (k, 0, OP_EXISTS, vec![], 0),
                Req::DoesNotExist(k) => (k, 0, OP_DOES_NOT_EXIST, vec![], 0),
                Req::Gt(k, i) => (k, 0, OP_GT, vec![], i),
                Req::Lt(k, i) => (k, 0, OP_LT, vec![], i),
                Req::NameIn(v) => (-1, 1, OP_IN, v, 0),
                Req::NameNotIn(v) => (-1, 1, OP_NOT_IN, v, 0),
            };
            self.keys.push(key);
            self.is_field.push(field);
            self.operators.push(op);
            self.values.extend(values);
            self.value_offsets.push(self.values.len() as i64);
            self.int_values.push(int);
        }
        self.term_weights.push(weight);
        self.term_offsets.push(self.keys.len() as i64);
        self.term_weights.len() as i64 - 1
    }
}

impl OwnedClasses {
    pub fn add(&mut self, f: impl FnOnce(&mut TestClass)) -> usize {
        let mut c = TestClass::default();
        f(&mut c);
        self.classes.push(c);
        self.built = None;
        self.classes.len() - 1
    }

    pub fn view(&mut self) -> Classes<'_> {
        if self.built.is_none() {
            let mut b = BuiltClasses {
                required_offsets: vec![0],
                preferred_offsets: vec![0],
                prefilter_offsets: vec![0],
                term_offsets: vec![0],
                value_offsets: vec![0],
                ..BuiltClasses::default()
            };
            b.tolerations = Some(OwnedTolerations::new(self.classes.iter().map(|c| c.tolerations.clone()).collect()));
            for c in &self.classes {
                b.node_names.push(c.node_name.unwrap_or(-1));
                let sel = c.node_selector.as_ref().map_or(-1, |reqs| b.add_term(0, reqs));
                b.node_selector_term.push(sel);
                b.has_required.push(c.required.is_some() as u8);
                for term in c.required.iter().flatten() {
                    let t = b.add_term(0, term);
                    b.required_terms.push(t);
                }
                b.required_offsets.push(b.required_terms.len() as i64);
                for (w, term) in &c.preferred {
                    let t = b.add_term(*w, term);
                    b.preferred_terms.push(t);
                }
                b.preferred_offsets.push(b.preferred_terms.len() as i64);
                b.has_prefilter.push(c.prefilter.is_some() as u8);
                b.prefilter_nodes.extend(c.prefilter.iter().flatten());
                b.prefilter_offsets.push(b.prefilter_nodes.len() as i64);
            }
            self.built = Some(b);
        }
        let b = self.built.as_ref().expect("built above");
        Classes {
            count: self.classes.len(),
            node_names: &b.node_names,
            tolerations: b.tolerations.as_ref().expect("built above").view(),
            node_selector_term: &b.node_selector_term,
            has_required: &b.has_required,
            required_offsets: &b.required_offsets,
            required_terms: &b.required_terms,
            preferred_offsets: &b.preferred_offsets,
            preferred_terms: &b.preferred_terms,
            has_prefilter: &b.has_prefilter,
            prefilter_offsets: &b.prefilter_offsets,
            prefilter_nodes: &b.prefilter_nodes,
            selectors: Selectors {
                term_offsets: &b.term_offsets,
                term_weights: &b.term_weights,
                keys: &b.keys,
                is_field: &b.is_field,
                operators: &b.operators,
                value_offsets: &b.value_offsets,
                values: &b.values,
                int_values: &b.int_values,
            },
        }
    }
}

/// Pending pods for batch tests.
#[derive(Clone)]
pub struct TestPod {
    pub request: Vec<i64>,
    pub class: i64,
    pub key: u64,
    pub ports: Vec<(u8, i32, i32)>,
}

pub struct OwnedPods {
    pub count: usize,
    requests: Vec<i64>,
    nonzero: Vec<i64>,
    classes: Vec<i64>,
    keys: Vec<u64>,
    ports: OwnedPorts,
}

impl OwnedPods {
    pub fn new(pods: &[TestPod]) -> Self {
        OwnedPods {
            count: pods.len(),
            requests: pods.iter().flat_map(|p| p.request.clone()).collect(),
            nonzero: pods
                .iter()
                .flat_map(|p| [p.request[CPU].max(100), p.request[MEMORY].max(200 << 20)])
                .collect(),
            classes: pods.iter().map(|p| p.class).collect(),
            keys: pods.iter().map(|p| p.key).collect(),
            ports: OwnedPorts::new(pods.iter().map(|p| p.ports.clone()).collect()),
        }
    }

    pub fn view(&self) -> Pods<'_> {
        Pods {
            count: self.count,
            requests: &self.requests,
            nonzero_requests: &self.nonzero,
            classes: &self.classes,
            keys: &self.keys,
            host_ports: self.ports.view(),
            table: None,
            preemption: None,
        }
    }
}

/// A pending pod of class 0 requesting `cpu` millicores and 1Gi of memory.
pub fn pod(cpu: i64, key: u64) -> TestPod {
    TestPod {
        request: vec![cpu, 1 << 30, 0, 0],
        class: 0,
        key,
        ports: vec![],
    }
}

pub fn no_metrics() -> Metrics<'static> {
    Metrics {
        values: &[],
        specs: vec![],
    }
}

/// Schedule `pods` (with `table`, if any) under the default profile and
/// explain pod 0: its verdict and scores on every node.
pub fn explain_first(
    nodes: &NodeBuilder,
    classes: &mut OwnedClasses,
    pods: &[TestPod],
    table: Option<&OwnedPodTable>,
) -> (Outcome, Explanation) {
    let nodes = nodes.build();
    let owned = OwnedPods::new(pods);
    let mut pods = owned.view();
    pods.table = table.map(|t| t.view());
    let options = ScheduleOptions {
        explain: Some(0),
        ..ScheduleOptions::default()
    };
    let mut out = schedule_batch(&nodes.view(), &classes.view(), &pods, &no_metrics(), &Profile::default(), &options).expect("valid input");
    let ex = out.explanation.take().expect("explained");
    (out, ex)
}

/// Each node's first failing reason code in an explanation (`FEASIBLE` where it passes).
pub fn verdicts(ex: &Explanation) -> Vec<u32> {
    (0..ex.reason_offsets.len() - 1)
        .map(|node| ex.reason_codes[row(&ex.reason_offsets, node)].first().copied().unwrap_or(FEASIBLE))
        .collect()
}

/// A score plugin's raw and normalized scores per node in an explanation.
pub fn scores_of(ex: &Explanation, plugin: &str) -> (Vec<f64>, Vec<f64>) {
    let k = ex.plugins.iter().position(|p| p == plugin).expect("a score plugin");
    let n = ex.totals.len();
    (ex.raw[k * n..(k + 1) * n].to_vec(), ex.normalized[k * n..(k + 1) * n].to_vec())
}
