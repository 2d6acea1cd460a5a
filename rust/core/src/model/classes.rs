//! Static constraint classes: the tolerations, node selector, node affinity
//! and node name that pods of one class share.

use super::error::{check_index, check_len, check_offsets, EngineError};

#[derive(Clone, Copy)]
pub struct Tolerations<'a> {
    pub offsets: &'a [i64],
    /// -1 for an empty key (matches every key).
    pub keys: &'a [i32],
    pub operators: &'a [u8],
    pub values: &'a [i32],
    pub effects: &'a [u8],
}

/// Node selector terms and their requirements, shared by all classes.
#[derive(Clone, Copy)]
pub struct Selectors<'a> {
    /// Term -> its requirements.
    pub term_offsets: &'a [i64],
    /// Weight of a preferred term (unused for required terms).
    pub term_weights: &'a [i64],
    /// Requirement key: a label key id, or the `metadata.name` field where `is_field` is 1.
    pub keys: &'a [i32],
    pub is_field: &'a [u8],
    pub operators: &'a [u8],
    pub value_offsets: &'a [i64],
    pub values: &'a [i32],
    /// The single value of a Gt/Lt requirement, parsed.
    pub int_values: &'a [i64],
}

impl Selectors<'_> {
    fn validate(&self) -> Result<(), EngineError> {
        let terms = self.term_weights.len();
        let reqs = self.keys.len();
        check_offsets("selector term offsets", self.term_offsets, terms, reqs)?;
        check_len("selector is_field", self.is_field.len(), reqs)?;
        check_len("selector operators", self.operators.len(), reqs)?;
        check_len("selector int values", self.int_values.len(), reqs)?;
        check_offsets("selector value offsets", self.value_offsets, reqs, self.values.len())
    }
}

/// Static constraint classes: pods with equal tolerations, node selectors,
/// affinity and node name share a class, so the node-level filters and
/// scores that cannot change within a batch are computed once per class.
#[derive(Clone, Copy)]
pub struct Classes<'a> {
    pub count: usize,
    /// Requested node name id, -1 for none.
    pub node_names: &'a [i32],
    pub tolerations: Tolerations<'a>,
    /// Term holding the nodeSelector map (ANDed with the affinity), -1 for none.
    pub node_selector_term: &'a [i64],
    /// 1 where the pod has requiredDuringScheduling node affinity.
    pub has_required: &'a [u8],
    pub required_offsets: &'a [i64],
    pub required_terms: &'a [i64],
    pub preferred_offsets: &'a [i64],
    pub preferred_terms: &'a [i64],
    /// 1 where NodeAffinity's PreFilter restricts the nodes to `prefilter_nodes`.
    pub has_prefilter: &'a [u8],
    pub prefilter_offsets: &'a [i64],
    pub prefilter_nodes: &'a [i64],
    /// The profile's NodeAffinity `addedAffinity` required terms (ORed), for
    /// every class; empty for none.
    pub enforced_terms: &'a [i64],
    pub selectors: Selectors<'a>,
}

impl Classes<'_> {
    pub fn validate(&self, nodes: usize) -> Result<(), EngineError> {
        let c = self.count;
        check_len("class node names", self.node_names.len(), c)?;
        let t = &self.tolerations;
        check_offsets("toleration offsets", t.offsets, c, t.keys.len())?;
        check_len("toleration operators", t.operators.len(), t.keys.len())?;
        check_len("toleration values", t.values.len(), t.keys.len())?;
        check_len("toleration effects", t.effects.len(), t.keys.len())?;
        check_len("class node selector term", self.node_selector_term.len(), c)?;
        check_len("class has required", self.has_required.len(), c)?;
        check_offsets("class required offsets", self.required_offsets, c, self.required_terms.len())?;
        check_offsets("class preferred offsets", self.preferred_offsets, c, self.preferred_terms.len())?;
        check_len("class has prefilter", self.has_prefilter.len(), c)?;
        check_offsets("class prefilter offsets", self.prefilter_offsets, c, self.prefilter_nodes.len())?;
        self.selectors.validate()?;
        let terms = self.selectors.term_weights.len();
        for &term in self.required_terms.iter().chain(self.preferred_terms).chain(self.enforced_terms) {
            check_index("selector term", term, terms)?;
        }
        for &term in self.node_selector_term {
            if term >= 0 {
                check_index("node selector term", term, terms)?;
            }
        }
        for &node in self.prefilter_nodes {
            check_index("prefilter node", node, nodes)?;
        }
        Ok(())
    }
}
