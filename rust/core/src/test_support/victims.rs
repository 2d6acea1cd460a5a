//! Evictable bound pods for the preemption tests.

use super::nodes::OwnedPorts;
use crate::model::Victims;

/// An evictable bound pod, for preemption tests.
#[derive(Clone, Default)]
pub struct TestVictim {
    /// Row in the pod table, -1 for none.
    pub row: i64,
    pub node: i64,
    pub priority: i64,
    pub request: Vec<i64>,
    pub start_time: i64,
    pub terminating: bool,
    pub ports: Vec<(u8, i32, i32)>,
    /// Indices of the PodDisruptionBudgets that select it.
    pub pdbs: Vec<i64>,
}

pub struct OwnedVictims {
    count: usize,
    rows: Vec<i64>,
    nodes: Vec<i64>,
    priorities: Vec<i64>,
    requests: Vec<i64>,
    start_times: Vec<i64>,
    terminating: Vec<u8>,
    ports: OwnedPorts,
    pdb_offsets: Vec<i64>,
    pdbs: Vec<i64>,
    pdb_allowed: Vec<i64>,
}

impl OwnedVictims {
    /// `resources` request columns per victim (shorter requests are padded
    /// with zeros); `pdb_allowed` is each budget's `disruptionsAllowed`.
    pub fn new(victims: &[TestVictim], resources: usize, pdb_allowed: Vec<i64>) -> Self {
        let mut pdb_offsets = vec![0];
        let mut pdbs = Vec::new();
        for v in victims {
            pdbs.extend(&v.pdbs);
            pdb_offsets.push(pdbs.len() as i64);
        }
        OwnedVictims {
            count: victims.len(),
            rows: victims.iter().map(|v| v.row).collect(),
            nodes: victims.iter().map(|v| v.node).collect(),
            priorities: victims.iter().map(|v| v.priority).collect(),
            requests: victims
                .iter()
                .flat_map(|v| {
                    let mut r = v.request.clone();
                    r.resize(resources, 0);
                    r
                })
                .collect(),
            start_times: victims.iter().map(|v| v.start_time).collect(),
            terminating: victims.iter().map(|v| v.terminating as u8).collect(),
            ports: OwnedPorts::new(victims.iter().map(|v| v.ports.clone()).collect()),
            pdb_offsets,
            pdbs,
            pdb_allowed,
        }
    }

    pub fn view(&self) -> Victims<'_> {
        Victims {
            count: self.count,
            rows: &self.rows,
            nodes: &self.nodes,
            priorities: &self.priorities,
            requests: &self.requests,
            start_times: &self.start_times,
            terminating: &self.terminating,
            ports: self.ports.view(),
            pdb_offsets: &self.pdb_offsets,
            pdbs: &self.pdbs,
            pdb_allowed: &self.pdb_allowed,
        }
    }
}
