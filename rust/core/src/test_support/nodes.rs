//! Node tables, tolerations and host ports.

use crate::model::*;

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
    /// Image ids (indexes into `NodeBuilder::image_sizes`).
    pub images: Vec<i32>,
}

pub struct NodeBuilder {
    pub resources: usize,
    /// Per image id: its size in bytes.
    pub image_sizes: Vec<i64>,
    pub nodes: Vec<TestNode>,
    pub wildcard_ip: i32,
    pub unschedulable_key: i32,
    pub empty_string: i32,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            resources: 4,
            image_sizes: Vec::new(),
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
            images: Vec::new(),
        };
        f(&mut n);
        n.labels.sort_by_key(|l| l.0);
        n.images.sort_unstable();
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
            image_offsets: vec![0],
            image_sizes: self.image_sizes.clone(),
            image_node_counts: vec![0; self.image_sizes.len()],
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
            for &id in &n.images {
                o.image_ids.push(id);
                o.image_node_counts[id as usize] += 1;
            }
            o.image_offsets.push(o.image_ids.len() as i64);
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
    pub image_offsets: Vec<i64>,
    pub image_ids: Vec<i32>,
    pub image_sizes: Vec<i64>,
    pub image_node_counts: Vec<i64>,
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
            images: Images {
                offsets: &self.image_offsets,
                ids: &self.image_ids,
                sizes: &self.image_sizes,
                node_counts: &self.image_node_counts,
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
