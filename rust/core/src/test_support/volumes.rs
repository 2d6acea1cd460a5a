//! PersistentVolumes and the batch's claims; their node affinity and
//! topology terms become classes' required terms, so they share the class
//! selector table as the engine expects.

use super::classes::{OwnedClasses, Req};
use crate::model::*;

/// One claim of a pending pod.
#[derive(Clone)]
pub struct TestClaim {
    /// The volume it is bound to, `UNBOUND` or `MISSING_PV`.
    pub pv: i64,
    pub selected_node: i64,
    /// Candidate volumes, smallest first.
    pub candidates: Vec<i64>,
    pub provisionable: bool,
    /// The class's `allowedTopologies` (ORed terms; empty: every node).
    pub topology: Vec<Vec<Req>>,
}

/// A WaitForFirstConsumer claim that may take `candidates` and cannot be provisioned.
pub fn wffc(candidates: &[i64]) -> TestClaim {
    TestClaim {
        pv: UNBOUND,
        selected_node: NO_SELECTED_NODE,
        candidates: candidates.to_vec(),
        provisionable: false,
        topology: Vec::new(),
    }
}

/// A claim bound to volume `pv`.
pub fn bound(pv: i64) -> TestClaim {
    TestClaim {
        candidates: Vec::new(),
        pv,
        ..wffc(&[])
    }
}

/// A volume zone constraint: label key, alternative key, allowed values.
pub type TestZone = (i32, i32, Vec<i32>);

#[derive(Default)]
pub struct OwnedVolumes {
    pvs: usize,
    pv_has_affinity: Vec<u8>,
    pv_term_offsets: Vec<i64>,
    pv_terms: Vec<i64>,
    claim_offsets: Vec<i64>,
    claim_pvs: Vec<i64>,
    claim_selected_nodes: Vec<i64>,
    candidate_offsets: Vec<i64>,
    candidates: Vec<i64>,
    provisionable: Vec<u8>,
    topology_offsets: Vec<i64>,
    topology_terms: Vec<i64>,
    zone_label_keys: Vec<i32>,
    zone_offsets: Vec<i64>,
    zone_keys: Vec<i32>,
    zone_alt_keys: Vec<i32>,
    zone_value_offsets: Vec<i64>,
    zone_values: Vec<i32>,
    rwop_offsets: Vec<i64>,
    rwop_claims: Vec<i64>,
    rwop_user_offsets: Vec<i64>,
    rwop_users: Vec<i64>,
    limit_offsets: Vec<i64>,
    limit_drivers: Vec<i32>,
    limit_counts: Vec<i64>,
    attached_offsets: Vec<i64>,
    attached_volumes: Vec<i32>,
    attached_drivers: Vec<i32>,
    attach_offsets: Vec<i64>,
    attach_volumes: Vec<i32>,
    attach_drivers: Vec<i32>,
}

impl OwnedVolumes {
    /// Volumes with their node affinity (None: any node), and per pending
    /// pod its claims and zone constraints; `zone_label_keys` are the four
    /// topology keys. Adds a class to `classes` per affinity and topology.
    pub fn new(
        classes: &mut OwnedClasses,
        pvs: &[Option<Vec<Vec<Req>>>],
        pods: &[Vec<TestClaim>],
        zones: &[Vec<TestZone>],
        zone_label_keys: [i32; 4],
    ) -> OwnedVolumes {
        let pv_classes: Vec<Option<usize>> = pvs
            .iter()
            .map(|a| a.as_ref().map(|terms| classes.add(|c| c.required = Some(terms.clone()))))
            .collect();
        let topology_classes: Vec<Vec<usize>> = pods
            .iter()
            .map(|claims| {
                claims
                    .iter()
                    .map(|claim| classes.add(|c| c.required = Some(claim.topology.clone())))
                    .collect()
            })
            .collect();
        let view = classes.view();
        let terms_of = |class: usize| view.required_terms[row(view.required_offsets, class)].to_vec();
        let mut o = OwnedVolumes {
            pvs: pvs.len(),
            pv_term_offsets: vec![0],
            claim_offsets: vec![0],
            candidate_offsets: vec![0],
            topology_offsets: vec![0],
            zone_label_keys: zone_label_keys.to_vec(),
            zone_offsets: vec![0],
            zone_value_offsets: vec![0],
            rwop_offsets: vec![0; pods.len() + 1],
            rwop_user_offsets: vec![0],
            attach_offsets: vec![0; pods.len() + 1],
            ..OwnedVolumes::default()
        };
        for class in &pv_classes {
            o.pv_has_affinity.push(class.is_some() as u8);
            o.pv_terms.extend(class.map(terms_of).unwrap_or_default());
            o.pv_term_offsets.push(o.pv_terms.len() as i64);
        }
        for (claims, topology) in pods.iter().zip(&topology_classes) {
            for (claim, &class) in claims.iter().zip(topology) {
                o.claim_pvs.push(claim.pv);
                o.claim_selected_nodes.push(claim.selected_node);
                o.candidates.extend(&claim.candidates);
                o.candidate_offsets.push(o.candidates.len() as i64);
                o.provisionable.push(claim.provisionable as u8);
                o.topology_terms.extend(terms_of(class));
                o.topology_offsets.push(o.topology_terms.len() as i64);
            }
            o.claim_offsets.push(o.claim_pvs.len() as i64);
        }
        for pod in 0..pods.len() {
            for (key, alt, values) in zones.get(pod).into_iter().flatten() {
                o.zone_keys.push(*key);
                o.zone_alt_keys.push(*alt);
                o.zone_values.extend(values);
                o.zone_value_offsets.push(o.zone_values.len() as i64);
            }
            o.zone_offsets.push(o.zone_keys.len() as i64);
        }
        o
    }

    /// ReadWriteOncePod claims: per pending pod its claim ids, per claim its users' rows.
    pub fn set_rwop(&mut self, pods: &[Vec<i64>], users: &[Vec<i64>]) {
        self.rwop_offsets = vec![0];
        self.rwop_claims.clear();
        for claims in pods {
            self.rwop_claims.extend(claims);
            self.rwop_offsets.push(self.rwop_claims.len() as i64);
        }
        self.rwop_user_offsets = vec![0];
        self.rwop_users.clear();
        for u in users {
            self.rwop_users.extend(u);
            self.rwop_user_offsets.push(self.rwop_users.len() as i64);
        }
    }

    /// Attach limits: per node its (driver, limit) and attached (volume, driver)
    /// pairs; per pending pod its (volume, driver) pairs.
    pub fn set_limits(&mut self, limits: &[Vec<(i32, i64)>], attached: &[Vec<(i32, i32)>], pods: &[Vec<(i32, i32)>]) {
        self.limit_offsets = vec![0];
        for l in limits {
            self.limit_drivers.extend(l.iter().map(|p| p.0));
            self.limit_counts.extend(l.iter().map(|p| p.1));
            self.limit_offsets.push(self.limit_drivers.len() as i64);
        }
        self.attached_offsets = vec![0];
        for a in attached {
            self.attached_volumes.extend(a.iter().map(|p| p.0));
            self.attached_drivers.extend(a.iter().map(|p| p.1));
            self.attached_offsets.push(self.attached_volumes.len() as i64);
        }
        self.attach_offsets = vec![0];
        for a in pods {
            self.attach_volumes.extend(a.iter().map(|p| p.0));
            self.attach_drivers.extend(a.iter().map(|p| p.1));
            self.attach_offsets.push(self.attach_volumes.len() as i64);
        }
    }

    pub fn view(&self) -> Volumes<'_> {
        Volumes {
            pvs: self.pvs,
            pv_has_affinity: &self.pv_has_affinity,
            pv_term_offsets: &self.pv_term_offsets,
            pv_terms: &self.pv_terms,
            claim_offsets: &self.claim_offsets,
            claim_pvs: &self.claim_pvs,
            claim_selected_nodes: &self.claim_selected_nodes,
            candidate_offsets: &self.candidate_offsets,
            candidates: &self.candidates,
            provisionable: &self.provisionable,
            topology_offsets: &self.topology_offsets,
            topology_terms: &self.topology_terms,
            zone_label_keys: &self.zone_label_keys,
            zone_offsets: &self.zone_offsets,
            zone_keys: &self.zone_keys,
            zone_alt_keys: &self.zone_alt_keys,
            zone_value_offsets: &self.zone_value_offsets,
            zone_values: &self.zone_values,
            rwop_offsets: &self.rwop_offsets,
            rwop_claims: &self.rwop_claims,
            rwop_user_offsets: &self.rwop_user_offsets,
            rwop_users: &self.rwop_users,
            limit_offsets: &self.limit_offsets,
            limit_drivers: &self.limit_drivers,
            limit_counts: &self.limit_counts,
            attached_offsets: &self.attached_offsets,
            attached_volumes: &self.attached_volumes,
            attached_drivers: &self.attached_drivers,
            attach_offsets: &self.attach_offsets,
            attach_volumes: &self.attach_volumes,
            attach_drivers: &self.attach_drivers,
        }
    }
}
