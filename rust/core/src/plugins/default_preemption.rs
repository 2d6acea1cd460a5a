//! DefaultPreemption (PostFilter), as upstream (`plugins/defaultpreemption`
//! and `framework/preemption`): for a pod that fits nowhere, on the nodes
//! whose failure removing pods could resolve (a sample of them: from a
//! random offset until `num_candidates` are found), remove the pods of lower
//! priority, check the pod fits, then reprieve as many as possible (PodDisruptionBudget
//! violators first, higher priority first); pick the node with the fewest
//! PDB violations, then the lowest highest victim priority, the lowest sum of
//! priorities, the fewest victims, the latest start of its most important
//! victims, then the first node.

use crate::model::{row, Victims, FIRST_SCALAR};

/// Upstream DefaultPreemptionArgs defaults: the dry run stops once it has found
/// candidates on this share of the potential nodes (percent)...
pub const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
/// ...or at least this many, so small clusters are searched whole.
pub const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

/// Upstream `calculateNumCandidates`: how many candidates the dry run looks for
/// among `potential` nodes (never more than there are).
pub fn num_candidates(potential: usize) -> usize {
    (potential * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(potential)
}

/// Upstream `MoreImportantPod`: higher priority, then earlier start.
fn more_important(v: &Victims, a: usize, b: usize) -> std::cmp::Ordering {
    v.priorities[b].cmp(&v.priorities[a]).then(v.start_times[a].cmp(&v.start_times[b]))
}

/// A node where preemption makes the pod fit.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub node: usize,
    /// Most important first.
    pub victims: Vec<usize>,
    pub pdb_violations: usize,
}

/// What DefaultPreemption's PostFilter concluded for a pod that fits nowhere
/// (`Outcome::postfilter_verdicts`); upstream's status message for each is in
/// `ksched.engine.messages`.
pub mod verdict {
    /// A node was nominated (upstream: Success, no message).
    pub const NOMINATED: u8 = 1;
    /// `preemptionPolicy: Never`: "not eligible due to preemptionPolicy=Never."
    pub const NEVER: u8 = 2;
    /// Its victims on the nominated node are still terminating: "not eligible
    /// due to a terminating pod on the nominated node." (the nomination stays).
    pub const TERMINATING: u8 = 3;
    /// No candidate: a FitError over the nodes, whose histogram holds the dry
    /// run's reason codes and the two pseudo-codes below.
    pub const NO_CANDIDATE: u8 = 4;
}

/// Pseudo reason code of the dry run's FitError: a node whose filter failure
/// no eviction resolves ("Preemption is not helpful for scheduling").
pub const NOT_HELPFUL: u32 = u32::MAX;
/// Pseudo reason code: a node with no pod of lower priority to evict
/// ("No preemption victims found for incoming pod").
pub const NO_VICTIMS: u32 = u32::MAX - 1;

/// Why `select_victims` found no candidate on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// No pod of lower priority (upstream: UnschedulableAndUnresolvable, `NO_VICTIMS`).
    NoVictims,
    /// The pod does not fit even with all of them removed (upstream: the failing filter's status).
    StillUnfit,
}

/// Upstream `filterPodsWithPDBViolation`: split pods (in order) into those whose
/// eviction would exceed a budget and the rest.
fn split_by_pdb(v: &Victims, pods: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut allowed = v.pdb_allowed.to_vec();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for &p in pods {
        let mut violated = false;
        for j in row(v.pdb_offsets, p) {
            let k = v.pdbs[j] as usize;
            allowed[k] -= 1;
            violated |= allowed[k] < 0;
        }
        if violated {
            violating.push(p);
        } else {
            fine.push(p);
        }
    }
    (violating, fine)
}

/// Upstream `SelectVictimsOnNode`. `on_node` are the node's evictable pods;
/// `fits(removed)` says whether the preemptor fits with those pods removed.
pub fn select_victims(
    v: &Victims,
    node: usize,
    on_node: &[usize],
    priority: i64,
    fits: &mut impl FnMut(&[usize]) -> bool,
) -> Result<Candidate, Rejected> {
    let mut potential: Vec<usize> = on_node.iter().copied().filter(|&i| v.priorities[i] < priority).collect();
    if potential.is_empty() {
        return Err(Rejected::NoVictims);
    }
    if !fits(&potential) {
        return Err(Rejected::StillUnfit);
    }
    potential.sort_by(|&a, &b| more_important(v, a, b));
    let (violating, fine) = split_by_pdb(v, &potential);
    let mut removed = potential;
    let mut victims = Vec::new();
    let mut pdb_violations = 0;
    for (list, counts) in [(violating, true), (fine, false)] {
        for p in list {
            removed.retain(|&x| x != p);
            if !fits(&removed) {
                removed.push(p);
                victims.push(p);
                pdb_violations += counts as usize;
            }
        }
    }
    victims.sort_by(|&a, &b| more_important(v, a, b));
    Ok(Candidate {
        node,
        victims,
        pdb_violations,
    })
}

/// Upstream `pickOneNodeForPreemption` over candidates in node order.
pub fn pick(v: &Victims, candidates: &[Candidate]) -> Option<usize> {
    if let Some(i) = candidates.iter().position(|c| c.victims.is_empty()) {
        return Some(i);
    }
    // Offset keeps negative priorities positive, as upstream's MaxInt32 + 1.
    let offset = i32::MAX as i64 + 1;
    let key = |c: &Candidate| {
        let highest = v.priorities[c.victims[0]];
        let sum: i64 = c.victims.iter().map(|&p| v.priorities[p] + offset).sum();
        // The earliest start among the most important victims: later is better.
        let earliest = c
            .victims
            .iter()
            .filter(|&&p| v.priorities[p] == highest)
            .map(|&p| v.start_times[p])
            .min()
            .unwrap_or(i64::MAX);
        (c.pdb_violations, highest, sum, c.victims.len(), std::cmp::Reverse(earliest))
    };
    (0..candidates.len()).min_by_key(|&i| key(&candidates[i]))
}

/// Resource columns a victim's request occupies (cpu, memory, storage when positive; scalars when non-zero).
pub fn counted(request: &[i64], column: usize) -> bool {
    if column < FIRST_SCALAR {
        request[column] > 0
    } else {
        request[column] != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{OwnedVictims, TestVictim};

    #[test]
    fn num_candidates_as_upstream() {
        // Upstream TestCalculateNumCandidates (default args: 10 %, at least 100).
        for (name, potential, want) in [
            ("fewer nodes than the minimum: all", 10, 10),
            ("the minimum", 100, 100),
            ("10 % below the minimum", 500, 100),
            ("10 % above the minimum", 5000, 500),
            ("10 % rounds down", 2345, 234),
            ("none", 0, 0),
        ] {
            assert_eq!(num_candidates(potential), want, "{name}");
        }
    }

    /// Victims on one node with the given priorities, start times and PodDisruptionBudgets.
    fn victims(priorities: &[i64], starts: &[i64], pdbs: &[Vec<i64>], pdb_allowed: Vec<i64>) -> OwnedVictims {
        let list: Vec<TestVictim> = (0..priorities.len())
            .map(|i| TestVictim {
                priority: priorities[i],
                start_time: starts[i],
                pdbs: pdbs.get(i).cloned().unwrap_or_default(),
                ..TestVictim::default()
            })
            .collect();
        OwnedVictims::new(&list, 0, pdb_allowed)
    }

    #[test]
    fn reprieves_the_most_important_pods_that_can_stay() {
        // Four pods of 1 unit each on a node with room for the preemptor only if two leave.
        let prio = [5, 1, 3, 1];
        let starts = [0, 0, 0, 1];
        let owned = victims(&prio, &starts, &[], vec![]);
        let v = owned.view();
        let mut fits = |removed: &[usize]| removed.len() >= 2;
        let c = select_victims(&v, 0, &[0, 1, 2, 3], 10, &mut fits).unwrap();
        // Pods 0 (prio 5) and 2 (prio 3) are reprieved; the two of priority 1 go.
        assert_eq!(c.victims, vec![1, 3]);
        assert_eq!(c.pdb_violations, 0);
        // Nothing of lower priority: not a candidate (upstream TestPostFilter
        // "pod with tied priority is still unschedulable").
        assert_eq!(select_victims(&v, 0, &[0, 1, 2, 3], 1, &mut fits), Err(Rejected::NoVictims));
        // Upstream "no candidate nodes found, no enough resource after removing low priority pods".
        assert_eq!(
            select_victims(&v, 0, &[0, 1, 2, 3], 10, &mut |_: &[usize]| false),
            Err(Rejected::StillUnfit)
        );
    }

    #[test]
    fn pdb_violators_are_reprieved_first_and_counted() {
        let prio = [1, 1];
        let starts = [0, 1];
        // Pod 0 is covered by a budget with no disruptions allowed.
        let owned = victims(&prio, &starts, &[vec![0]], vec![0]);
        let v = owned.view();
        let mut fits = |removed: &[usize]| !removed.is_empty();
        let c = select_victims(&v, 0, &[0, 1], 10, &mut fits).unwrap();
        assert_eq!(c.victims, vec![1], "the violator stays, the other goes");
        assert_eq!(c.pdb_violations, 0);
    }

    #[test]
    fn pick_prefers_fewer_violations_then_lower_priorities() {
        let prio = [1, 2, 1, 1];
        let starts = [0, 0, 5, 3];
        let owned = victims(&prio, &starts, &[], vec![]);
        let v = owned.view();
        let c = |node, victims: Vec<usize>, pdb_violations| Candidate {
            node,
            victims,
            pdb_violations,
        };
        assert_eq!(pick(&v, &[c(0, vec![0], 1), c(1, vec![1], 0)]), Some(1));
        assert_eq!(
            pick(&v, &[c(0, vec![1], 0), c(1, vec![0, 2], 0)]),
            Some(1),
            "lower highest priority"
        );
        assert_eq!(pick(&v, &[c(0, vec![0, 2], 0), c(1, vec![3], 0)]), Some(1), "lower sum");
        assert_eq!(pick(&v, &[c(0, vec![3], 0), c(1, vec![2], 0)]), Some(1), "later start");
    }
}
