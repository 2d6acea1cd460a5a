//! Constraint classes: node names, tolerations, node selectors and affinity.

use super::nodes::OwnedTolerations;
use crate::model::*;

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
    /// The profile's addedAffinity required terms.
    pub enforced: Vec<Vec<Req>>,
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
    enforced_terms: Vec<i64>,
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
            for term in &self.enforced {
                let t = b.add_term(0, term);
                b.enforced_terms.push(t);
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
            enforced_terms: &b.enforced_terms,
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
