//! NodeResourcesBalancedAllocation: prefers nodes whose resource fractions
//! stay close to each other once the pod is placed, relative to before
//! (upstream 1.36 scores the change: 50 + (50 + with - without) / 2).

use crate::model::FIRST_SCALAR;
use crate::MAX_NODE_SCORE;

pub const NAME: &str = "NodeResourcesBalancedAllocation";

fn balance(values: &[(i64, i64)]) -> i64 {
    // (requested, allocatable) per resource with non-zero allocatable.
    let fractions = values.iter().map(|&(req, cap)| (req as f64 / cap as f64).min(1.0));
    let n = values.len();
    let std = match n {
        0 | 1 => 0.0,
        2 => {
            let f: Vec<f64> = fractions.collect();
            ((f[0] - f[1]) / 2.0).abs()
        }
        _ => {
            let f: Vec<f64> = fractions.collect();
            let mean = f.iter().sum::<f64>() / n as f64;
            (f.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64).sqrt()
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
    let mut with_pod = [(0i64, 0i64); 8];
    let mut without_pod = [(0i64, 0i64); 8];
    let mut with_vec = Vec::new();
    let mut without_vec = Vec::new();
    let mut n = 0;
    for &r in resources {
        if r >= FIRST_SCALAR && request[r] == 0 {
            continue;
        }
        let cap = allocatable[r];
        if cap == 0 {
            continue;
        }
        let pair_with = (requested[r] + request[r], cap);
        let pair_without = (requested[r], cap);
        if n < with_pod.len() {
            with_pod[n] = pair_with;
            without_pod[n] = pair_without;
        } else {
            if n == with_pod.len() {
                with_vec.extend_from_slice(&with_pod);
                without_vec.extend_from_slice(&without_pod);
            }
            with_vec.push(pair_with);
            without_vec.push(pair_without);
        }
        n += 1;
    }
    let (with, without) = if n <= with_pod.len() {
        (&with_pod[..n], &without_pod[..n])
    } else {
        (&with_vec[..], &without_vec[..])
    };
    let half = MAX_NODE_SCORE / 2;
    half + (half + balance(with) - balance(without)) / 2
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
