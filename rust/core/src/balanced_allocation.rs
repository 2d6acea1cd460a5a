//! NodeResourcesBalancedAllocation: prefers nodes whose resource fractions
//! stay close to each other once the pod is placed, relative to before
//! (upstream 1.36 scores the change: 50 + (50 + with - without) / 2).

use crate::model::FIRST_SCALAR;
use crate::MAX_NODE_SCORE;

pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// Upstream `balancedResourceScore`: 100 × (1 − the standard deviation of the
/// resource fractions), each fraction capped at 1. Summed in order, as upstream.
fn balance(fractions: impl Iterator<Item = f64> + Clone) -> i64 {
    let n = fractions.clone().count();
    let std = match n {
        0 | 1 => 0.0,
        2 => {
            let mut it = fractions;
            let (a, b) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
            ((a - b) / 2.0).abs()
        }
        _ => {
            let mean = fractions.clone().sum::<f64>() / n as f64;
            (fractions.map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// Whether the plugin scores this pod at all: upstream skips best-effort pods
/// (no request in any of the plugin's resources) and every node scores 0.
pub fn applies(resources: &[usize], request: &[i64]) -> bool {
    resources.iter().any(|&r| request[r] != 0)
}

/// Score of one node, 0..=100 (real requests, not the non-zero defaults).
#[inline]
pub fn score(resources: &[usize], allocatable: &[i64], requested: &[i64], request: &[i64]) -> i64 {
    // Scalar resources the pod does not request, and resources the node lacks, are left out.
    let scored = |r: &&usize| !(**r >= FIRST_SCALAR && request[**r] == 0) && allocatable[**r] != 0;
    let fraction = |used: i64, r: usize| (used as f64 / allocatable[r] as f64).min(1.0);
    let with_pod = resources.iter().filter(scored).map(|&r| fraction(requested[r] + request[r], r));
    let without_pod = resources.iter().filter(scored).map(|&r| fraction(requested[r], r));
    let half = MAX_NODE_SCORE / 2;
    half + (half + balance(with_pod) - balance(without_pod)) / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CPU, MEMORY};

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            allocatable: [i64; 4],
            requested: [i64; 4],
            request: [i64; 4],
            want: i64,
        }
        let cases = vec![
            // empty node, pod 1000/4000 cpu and 2/8 memory: both 0.25 -> balance 100 with, 100 without.
            Case {
                name: "balanced pod on empty node",
                allocatable: [4000, 8, 0, 0],
                requested: [0; 4],
                request: [1000, 2, 0, 0],
                want: 75,
            },
            // with: cpu 0.5, mem 0.0 -> std 0.25 -> 75; without: 100 -> 50 + (50 + 75 - 100) / 2 = 62.
            Case {
                name: "cpu-only pod",
                allocatable: [4000, 8, 0, 0],
                requested: [0; 4],
                request: [2000, 0, 0, 0],
                want: 62,
            },
            // without: cpu 0.5 mem 0 -> 75; with: 0.5 / 0.5 -> 100 -> 50 + (50 + 100 - 75) / 2 = 87.
            Case {
                name: "pod that rebalances",
                allocatable: [4000, 8, 0, 0],
                requested: [2000, 0, 0, 0],
                request: [0, 4, 0, 0],
                want: 87,
            },
        ];
        for case in cases {
            let got = score(&[CPU, MEMORY], &case.allocatable, &case.requested, &case.request);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
        assert!(!applies(&[CPU, MEMORY], &[0, 0, 5, 0]));
    }
}
