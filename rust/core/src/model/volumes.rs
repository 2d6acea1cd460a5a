//! The batch's PersistentVolumeClaims, the PersistentVolumes they may bind
//! and the zones of the bound ones (VolumeBinding, VolumeZone).
//!
//! The caller resolves everything that needs names or API objects: which
//! claim is bound to which volume, which unbound volumes could serve a
//! WaitForFirstConsumer claim by class, access modes, capacity, volume mode
//! and selector (upstream's `FindMatchingVolume` without the node), and
//! whether the claim's class can provision. What depends on the node — the
//! volumes' node affinity, the class's `allowedTopologies`, the zone labels —
//! and on the batch — volumes taken by earlier placements — is left here.
//! Node affinity and topology terms are terms of the class selector table
//! (`Classes::selectors`), matched on node labels.

use super::error::{check_index, check_len, check_offsets, EngineError};

/// `Volumes::claim_pvs` of a claim that is not bound (WaitForFirstConsumer).
pub const UNBOUND: i64 = -1;
/// `Volumes::claim_pvs` of a claim bound to a volume that does not exist.
pub const MISSING_PV: i64 = -2;
/// `Volumes::claim_selected_nodes` of a claim without `volume.kubernetes.io/selected-node`.
pub const NO_SELECTED_NODE: i64 = -1;
/// `Volumes::claim_selected_nodes` of a claim whose selected node is not in the table.
pub const UNKNOWN_NODE: i64 = -2;

#[derive(Clone, Copy)]
pub struct Volumes<'a> {
    /// Number of PersistentVolumes.
    pub pvs: usize,
    /// Per volume: 1 where it has a required node affinity, and its terms (ORed).
    pub pv_has_affinity: &'a [u8],
    pub pv_term_offsets: &'a [i64],
    pub pv_terms: &'a [i64],
    /// Pending pod -> its claims, in upstream's order: bound claims, then
    /// unbound ones with a selected node, then the rest by increasing request.
    pub claim_offsets: &'a [i64],
    /// Per claim: the volume it is bound to, `UNBOUND` or `MISSING_PV`.
    pub claim_pvs: &'a [i64],
    /// Per claim: the node it was selected for, `NO_SELECTED_NODE` or `UNKNOWN_NODE`.
    pub claim_selected_nodes: &'a [i64],
    /// Per claim: the volumes that could serve it on some node, smallest
    /// first (a volume pre-bound to the claim alone).
    pub candidate_offsets: &'a [i64],
    pub candidates: &'a [i64],
    /// Per claim: 1 where its class has a provisioner, and the class's
    /// `allowedTopologies` terms (ORed; none: every node).
    pub provisionable: &'a [u8],
    pub topology_offsets: &'a [i64],
    pub topology_terms: &'a [i64],
    /// VolumeZone: the four zone and region label keys (beta zone, beta
    /// region, zone, region); per pod its bound volumes' zone constraints:
    /// a label key, the key a node may carry instead (the GA one for a beta
    /// key) and the allowed values.
    pub zone_label_keys: &'a [i32],
    pub zone_offsets: &'a [i64],
    pub zone_keys: &'a [i32],
    pub zone_alt_keys: &'a [i32],
    pub zone_value_offsets: &'a [i64],
    pub zone_values: &'a [i32],
    /// VolumeRestrictions: pending pod -> its ReadWriteOncePod claims (ids
    /// 0..n of this table, shared by pods of the batch naming one claim), and
    /// per such claim the pod table rows of the bound pods that use it.
    pub rwop_offsets: &'a [i64],
    pub rwop_claims: &'a [i64],
    pub rwop_user_offsets: &'a [i64],
    pub rwop_users: &'a [i64],
    /// NodeVolumeLimits: per node its CSI drivers' attach limits; per node
    /// the (volume, driver) pairs its bound pods attach; per pending pod the
    /// (volume, driver) pairs it would attach. Volumes and drivers are interned ids.
    pub limit_offsets: &'a [i64],
    pub limit_drivers: &'a [i32],
    pub limit_counts: &'a [i64],
    pub attached_offsets: &'a [i64],
    pub attached_volumes: &'a [i32],
    pub attached_drivers: &'a [i32],
    pub attach_offsets: &'a [i64],
    pub attach_volumes: &'a [i32],
    pub attach_drivers: &'a [i32],
}

impl Volumes<'_> {
    /// Number of ReadWriteOncePod claims.
    pub fn rwop_count(&self) -> usize {
        self.rwop_user_offsets.len().saturating_sub(1)
    }

    pub fn validate(&self, pods: usize, nodes: usize, terms: usize) -> Result<(), EngineError> {
        let p = self.pvs;
        check_len("pv has affinity", self.pv_has_affinity.len(), p)?;
        check_offsets("pv term offsets", self.pv_term_offsets, p, self.pv_terms.len())?;
        check_offsets("claim offsets", self.claim_offsets, pods, self.claim_pvs.len())?;
        let c = self.claim_pvs.len();
        check_len("claim selected nodes", self.claim_selected_nodes.len(), c)?;
        check_offsets("claim candidate offsets", self.candidate_offsets, c, self.candidates.len())?;
        check_len("claim provisionable", self.provisionable.len(), c)?;
        check_offsets("claim topology offsets", self.topology_offsets, c, self.topology_terms.len())?;
        check_len("zone label keys", self.zone_label_keys.len(), 4)?;
        check_offsets("zone offsets", self.zone_offsets, pods, self.zone_keys.len())?;
        check_len("zone alt keys", self.zone_alt_keys.len(), self.zone_keys.len())?;
        check_offsets(
            "zone value offsets",
            self.zone_value_offsets,
            self.zone_keys.len(),
            self.zone_values.len(),
        )?;
        for &term in self.pv_terms.iter().chain(self.topology_terms) {
            check_index("volume selector term", term, terms)?;
        }
        check_offsets("rwop offsets", self.rwop_offsets, pods, self.rwop_claims.len())?;
        let rwop = self.rwop_user_offsets.len().saturating_sub(1);
        check_offsets("rwop user offsets", self.rwop_user_offsets, rwop, self.rwop_users.len())?;
        for &c in self.rwop_claims {
            check_index("rwop claim", c, rwop)?;
        }
        // No limits at all (no node's CSINode has one): both per-node tables may be empty.
        if !self.limit_drivers.is_empty() {
            check_offsets("limit offsets", self.limit_offsets, nodes, self.limit_drivers.len())?;
            check_offsets("attached offsets", self.attached_offsets, nodes, self.attached_volumes.len())?;
        }
        check_len("limit counts", self.limit_counts.len(), self.limit_drivers.len())?;
        check_len("attached drivers", self.attached_drivers.len(), self.attached_volumes.len())?;
        check_offsets("attach offsets", self.attach_offsets, pods, self.attach_volumes.len())?;
        check_len("attach drivers", self.attach_drivers.len(), self.attach_volumes.len())?;
        for &pv in self.claim_pvs {
            if pv != UNBOUND && pv != MISSING_PV {
                check_index("claim volume", pv, p)?;
            }
        }
        for &pv in self.candidates {
            check_index("claim candidate volume", pv, p)?;
        }
        for &node in self.claim_selected_nodes {
            if node != NO_SELECTED_NODE && node != UNKNOWN_NODE {
                check_index("claim selected node", node, nodes)?;
            }
        }
        Ok(())
    }
}
