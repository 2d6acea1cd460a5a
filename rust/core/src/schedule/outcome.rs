//! The call's result (`Outcome`), appended to one pod at a time in batch order
//! (`OutcomeBuilder::push`, upstream's `Diagnosis` per pod): the node chosen
//! and its score, the nodes that failed a filter counted by reason,
//! preemption's PostFilter verdict, nomination and victims, and the volumes
//! a placed pod binds.

use super::explain::Explanation;
use super::preemption::PostFilter;

/// `Outcome::nodes` value of a pod that fits no node.
pub const UNSCHEDULABLE: i64 = -1;
/// `Outcome::nodes` value of a pod not attempted because the deadline passed.
pub const NOT_ATTEMPTED: i64 = -2;

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Chosen node per pod, or `UNSCHEDULABLE` / `NOT_ATTEMPTED`.
    pub nodes: Vec<i64>,
    /// Total weighted score of the chosen node (NaN when none).
    pub scores: Vec<f64>,
    /// Number of feasible nodes per pod.
    pub feasible: Vec<i64>,
    /// Pod -> (reason code, number of nodes) for the nodes that failed a filter.
    pub reason_offsets: Vec<i64>,
    pub reason_codes: Vec<u32>,
    pub reason_counts: Vec<i64>,
    pub explanation: Option<Explanation>,
    /// Node nominated by preemption per pod (-1 for none), and the chosen
    /// victims (`Victims` indices) per pod.
    pub nominated: Vec<i64>,
    pub victim_offsets: Vec<i64>,
    pub victims: Vec<i64>,
    /// DefaultPreemption's PostFilter per pod that fits nowhere (none where
    /// preemption is disabled): the pod, its `default_preemption::verdict`, and
    /// for `NO_CANDIDATE` the (reason code, nodes) of its FitError, where
    /// `default_preemption::NOT_HELPFUL` and `NO_VICTIMS` are pseudo-codes.
    pub postfilter_pods: Vec<i64>,
    pub postfilter_verdicts: Vec<u8>,
    pub postfilter_offsets: Vec<i64>,
    pub postfilter_codes: Vec<u32>,
    pub postfilter_counts: Vec<i64>,
    /// Per placed pod, per claim (in `Volumes` order): the PersistentVolume
    /// it binds (`Volumes` index), or `volume_binding::PROVISION`. Empty for
    /// pods not placed.
    pub volume_offsets: Vec<i64>,
    pub volumes: Vec<i64>,
    /// Per pod that fits nowhere, the nodes the threshold of a metric of
    /// `ScheduleOptions::threshold_metrics` rejected after every other filter
    /// passed there (the metric filter runs last), each with its reason code
    /// (`metrics::metric`, of kind `METRIC_ABOVE` or `METRIC_BELOW`): the nodes
    /// a pod whose threshold is relaxed could go to. Empty for other pods.
    pub threshold_offsets: Vec<i64>,
    pub threshold_nodes: Vec<u32>,
    pub threshold_codes: Vec<u32>,
}

/// One pod's outcome, as its steps decided it (`OutcomeBuilder::push`).
pub(super) struct PodOutcome<'s> {
    /// The chosen node, or `UNSCHEDULABLE` / `NOT_ATTEMPTED`.
    pub node: i64,
    /// The chosen node's total weighted score; NaN where none, or where placed without scoring.
    pub score: f64,
    pub feasible: usize,
    /// Nodes that failed a filter, per reason code.
    pub histogram: &'s [i64],
    /// The volumes a placed pod binds (`Outcome::volumes`).
    pub volumes: Vec<i64>,
    /// DefaultPreemption's PostFilter, for a pod that fits nowhere.
    pub postfilter: Option<PostFilter>,
    pub explanation: Option<Explanation>,
    /// The (node, reason code) pairs a threshold rejected, for a pod that fits nowhere (`Outcome::threshold_nodes`).
    pub thresholds: Vec<(u32, u32)>,
}

impl PodOutcome<'_> {
    /// A pod the call did not reach before its deadline.
    pub fn not_attempted() -> Self {
        PodOutcome {
            node: NOT_ATTEMPTED,
            score: f64::NAN,
            feasible: 0,
            histogram: &[],
            volumes: Vec::new(),
            postfilter: None,
            explanation: None,
            thresholds: Vec::new(),
        }
    }
}

/// An `Outcome` built one pod at a time.
pub(super) struct OutcomeBuilder {
    outcome: Outcome,
}

impl OutcomeBuilder {
    pub fn new() -> Self {
        OutcomeBuilder {
            outcome: Outcome {
                reason_offsets: vec![0],
                victim_offsets: vec![0],
                volume_offsets: vec![0],
                postfilter_offsets: vec![0],
                threshold_offsets: vec![0],
                ..Outcome::default()
            },
        }
    }

    /// Append the next pod's outcome.
    pub fn push(&mut self, pod: PodOutcome) {
        let out = &mut self.outcome;
        let index = out.nodes.len();
        out.nodes.push(pod.node);
        out.scores.push(pod.score);
        out.feasible.push(pod.feasible as i64);
        for (code, &count) in pod.histogram.iter().enumerate() {
            if count > 0 {
                out.reason_codes.push(code as u32);
                out.reason_counts.push(count);
            }
        }
        out.reason_offsets.push(out.reason_codes.len() as i64);
        out.volumes.extend(pod.volumes);
        out.volume_offsets.push(out.volumes.len() as i64);
        for &(node, code) in &pod.thresholds {
            out.threshold_nodes.push(node);
            out.threshold_codes.push(code);
        }
        out.threshold_offsets.push(out.threshold_nodes.len() as i64);
        let mut nominated = -1;
        if let Some(post) = pod.postfilter {
            if post.verdict != 0 {
                out.postfilter_pods.push(index as i64);
                out.postfilter_verdicts.push(post.verdict);
                for &(code, count) in &post.histogram {
                    out.postfilter_codes.push(code);
                    out.postfilter_counts.push(count);
                }
                out.postfilter_offsets.push(out.postfilter_codes.len() as i64);
            }
            if let Some(c) = post.candidate {
                nominated = c.node as i64;
                out.victims.extend(c.victims.iter().map(|&v| v as i64));
            }
        }
        out.nominated.push(nominated);
        out.victim_offsets.push(out.victims.len() as i64);
        if pod.explanation.is_some() {
            out.explanation = pod.explanation;
        }
    }

    pub fn finish(self) -> Outcome {
        self.outcome
    }
}
