//! NodeResourcesBalancedAllocation: prefers nodes whose resource fractions
//! stay close to each other once the pod is placed, relative to before
//! (upstream 1.36 scores the change: 50 + (50 + with - without) / 2).

use super::MAX_NODE_SCORE;
use crate::model::FIRST_SCALAR;

/// Upstream `balancedResourceScore`: 100 × (1 − the standard deviation of the
/// resource fractions), each fraction capped at 1. Summed in order, as upstream.
fn balance(fractions: &[f64]) -> i64 {
    let n = fractions.len();
    let std = match n {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        _ => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// Whether the plugin scores this pod at all: upstream skips best-effort pods
/// (no request in any of the plugin's resources) and every node scores 0.
pub fn applies(resources: &[usize], request: &[i64]) -> bool {
    resources.iter().any(|&r| request[r] != 0)
}

/// Resources scored without a heap allocation; longer lists use one.
const INLINE: usize = 8;

/// Whether the balance without the pod depends on the node alone: true
/// unless the pod requests a scalar resource the plugin scores (a scalar
/// resource counts only for pods that request it).
pub fn node_only(resources: &[usize], request: &[i64]) -> bool {
    !resources.iter().any(|&r| r >= FIRST_SCALAR && request[r] != 0)
}

/// The node's balance without the pod, for pods where [`node_only`] holds.
pub fn without_pod(resources: &[usize], allocatable: &[i64], requested: &[i64]) -> i64 {
    with_fractions(resources, allocatable, requested, None, true, |_, without_pod| balance(without_pod))
}

/// Score of one node, 0..=100 (real requests, not the non-zero defaults).
/// `without` is the node's [`without_pod`] balance where it applies.
#[inline]
pub fn score(resources: &[usize], allocatable: &[i64], requested: &[i64], request: &[i64], without: Option<i64>) -> i64 {
    let half = MAX_NODE_SCORE / 2;
    with_fractions(
        resources,
        allocatable,
        requested,
        Some(request),
        without.is_none(),
        |with_pod, without_pod| half + (half + balance(with_pod) - without.unwrap_or_else(|| balance(without_pod))) / 2,
    )
}

/// Call `f` with each scored resource's fraction with and without the pod
/// (no pod: scalar resources left out; `without` false: those fractions are
/// left at 0, saving a division). Scalar resources the pod does not request,
/// and resources the node lacks, are left out.
#[inline]
fn with_fractions<T>(
    resources: &[usize],
    allocatable: &[i64],
    requested: &[i64],
    request: Option<&[i64]>,
    without: bool,
    f: impl FnOnce(&[f64], &[f64]) -> T,
) -> T {
    if resources.len() > INLINE {
        let (mut with_pod, mut without_pod) = (Vec::new(), Vec::new());
        each_fraction(resources, allocatable, requested, request, without, |w, wo| {
            with_pod.push(w);
            without_pod.push(wo);
        });
        return f(&with_pod, &without_pod);
    }
    let (mut with_pod, mut without_pod, mut k) = ([0.0; INLINE], [0.0; INLINE], 0);
    each_fraction(resources, allocatable, requested, request, without, |w, wo| {
        with_pod[k] = w;
        without_pod[k] = wo;
        k += 1;
    });
    f(&with_pod[..k], &without_pod[..k])
}

#[inline]
fn each_fraction(
    resources: &[usize],
    allocatable: &[i64],
    requested: &[i64],
    request: Option<&[i64]>,
    without: bool,
    mut out: impl FnMut(f64, f64),
) {
    for &r in resources {
        let asked = request.map_or(0, |q| q[r]);
        if (r >= FIRST_SCALAR && asked == 0) || allocatable[r] == 0 {
            continue;
        }
        let capacity = allocatable[r] as f64;
        let without_pod = if without { (requested[r] as f64 / capacity).min(1.0) } else { 0.0 };
        out((requested[r].saturating_add(asked) as f64 / capacity).min(1.0), without_pod);
    }
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
            let got = score(&[CPU, MEMORY], &case.allocatable, &case.requested, &case.request, None);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
            let without = without_pod(&[CPU, MEMORY], &case.allocatable, &case.requested);
            let cached = score(&[CPU, MEMORY], &case.allocatable, &case.requested, &case.request, Some(without));
            assert_eq!(cached, got, "{}: the node-only balance gives the same score", case.name);
        }
        assert!(!applies(&[CPU, MEMORY], &[0, 0, 5, 0]));
    }
}
