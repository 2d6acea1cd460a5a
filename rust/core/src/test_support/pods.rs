//! Pending pods, and running a batch to explain one of them.

use super::classes::OwnedClasses;
use super::nodes::{NodeBuilder, OwnedPorts};
use super::pod_table::OwnedPodTable;
use crate::model::*;
use crate::plugins::FEASIBLE;
use crate::schedule::{schedule_batch, Explanation, Outcome, ScheduleOptions};

/// Pending pods for batch tests.
#[derive(Clone)]
pub struct TestPod {
    pub request: Vec<i64>,
    pub class: i64,
    pub key: u64,
    pub ports: Vec<(u8, i32, i32)>,
    /// Image ids of its containers that some node has, and its container count.
    pub images: Vec<i32>,
    pub containers: i64,
}

pub struct OwnedPods {
    pub count: usize,
    requests: Vec<i64>,
    nonzero: Vec<i64>,
    classes: Vec<i64>,
    keys: Vec<u64>,
    ports: OwnedPorts,
    image_offsets: Vec<i64>,
    image_ids: Vec<i32>,
    containers: Vec<i64>,
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
            image_offsets: std::iter::once(0)
                .chain(pods.iter().scan(0, |n, p| {
                    *n += p.images.len() as i64;
                    Some(*n)
                }))
                .collect(),
            image_ids: pods.iter().flat_map(|p| p.images.clone()).collect(),
            containers: pods.iter().map(|p| p.containers).collect(),
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
            images: PodImages {
                offsets: &self.image_offsets,
                ids: &self.image_ids,
                containers: &self.containers,
            },
            table: None,
            preemption: None,
            volumes: None,
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
        images: vec![],
        containers: 1,
    }
}

pub fn no_metrics() -> Metrics<'static> {
    Metrics::new(&[], vec![])
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
