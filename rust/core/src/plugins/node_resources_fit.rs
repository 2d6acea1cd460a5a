//! NodeResourcesFit: the pod's effective request must fit in the node's
//! allocatable minus what its pods already request (and the node must have a
//! pod slot left); scoring by LeastAllocated, MostAllocated or
//! RequestedToCapacityRatio over the profile's weighted resources.

use super::{Reason, MAX_NODE_SCORE};
use crate::model::{reason_code, PluginId, Strategy, CPU, FIRST_SCALAR, FIXED_REASON_COUNT, MEMORY};

pub const TOO_MANY_PODS: u32 = reason_code(PluginId::NodeResourcesFit, 0);
/// "Insufficient <resource>": one code per resource column from here on, after
/// every fixed reason (the caller names the resource).
pub const FIRST_INSUFFICIENT: u32 = FIXED_REASON_COUNT + 1;

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::resolvable("Too many pods")];

#[inline]
pub fn insufficient(resource: usize) -> u32 {
    FIRST_INSUFFICIENT + resource as u32
}

/// Upstream `maxUtilization` of RequestedToCapacityRatio.
const MAX_UTILIZATION: i64 = 100;
/// Shape scores are given 0..=10 (`config.MaxCustomPriorityScore`) and scaled to 0..=100.
const SHAPE_SCORE_SCALE: i64 = MAX_NODE_SCORE / 10;

/// Upstream `fitsRequest`. `requested_columns` are the columns where the pod
/// requests a non-zero amount. Calls `report` once per failure reason and
/// returns whether the pod fits.
#[inline]
pub fn filter(
    allocatable: &[i64],
    requested: &[i64],
    allowed_pods: i64,
    pod_count: i64,
    request: &[i64],
    requested_columns: &[usize],
    report: &mut impl FnMut(u32),
) -> bool {
    let mut fits = true;
    if pod_count + 1 > allowed_pods {
        report(TOO_MANY_PODS);
        fits = false;
    }
    for &r in requested_columns {
        let want = request[r];
        // cpu, memory and ephemeral-storage only count a positive request; scalars any non-zero one.
        let counted = if r < FIRST_SCALAR { want > 0 } else { want != 0 };
        if counted && want > allocatable[r].saturating_sub(requested[r]) {
            report(insufficient(r));
            fits = false;
        }
    }
    fits
}

/// Upstream `InsufficientResource.Unresolvable`: the pod asks more of a checked
/// resource than the node's whole allocatable, so the node's failure is
/// UnschedulableAndUnresolvable and no eviction can make room (preemption
/// skips the node: "Preemption is not helpful for scheduling").
pub fn exceeds_allocatable(allocatable: &[i64], request: &[i64], requested_columns: &[usize]) -> bool {
    requested_columns.iter().any(|&r| {
        let want = request[r];
        let counted = if r < FIRST_SCALAR { want > 0 } else { want != 0 };
        counted && want > allocatable[r]
    })
}

/// Whether `code` is one of this plugin's reasons.
pub fn reports(code: u32, resources: usize) -> bool {
    code == TOO_MANY_PODS || (FIRST_INSUFFICIENT..FIRST_INSUFFICIENT + resources as u32).contains(&code)
}

/// The node-side amount already allocated for scoring: cpu and memory use the
/// non-zero defaults (upstream `NonZeroRequested`), the rest real requests.
#[inline]
fn allocated_for_score(requested: &[i64], nonzero_requested: &[i64], column: usize) -> i64 {
    match column {
        CPU => nonzero_requested[0],
        MEMORY => nonzero_requested[1],
        _ => requested[column],
    }
}

#[inline]
fn pod_request_for_score(request: &[i64], nonzero_request: &[i64], column: usize) -> i64 {
    match column {
        CPU => nonzero_request[0],
        MEMORY => nonzero_request[1],
        _ => request[column],
    }
}

/// `part * MAX_NODE_SCORE / whole`: a capacity near i64's range (a node reporting
/// exabytes) times 100 does not fit in i64. The result is at most 100 for `0 <= part <= whole`.
fn scaled(part: i64, whole: i64) -> i64 {
    mul_div(part, MAX_NODE_SCORE, whole)
}

/// `a * b / c`, in i64 where the product fits (every real node: i128 division is a library
/// call that cost the engine bench about 10 %), else in i128.
#[inline]
pub(crate) fn mul_div(a: i64, b: i64, c: i64) -> i64 {
    match a.checked_mul(b) {
        Some(product) => product / c,
        None => (i128::from(a) * i128::from(b) / i128::from(c)) as i64,
    }
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    scaled(capacity - requested, capacity)
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    scaled(requested.min(capacity), capacity)
}

/// Upstream `helper.BuildBrokenLinearFunction` over scaled shape points.
fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for i in 0..shape.len() {
        if p <= shape[i].0 {
            if i == 0 {
                return shape[0].1 * SHAPE_SCORE_SCALE;
            }
            let (u0, s0) = (shape[i - 1].0, shape[i - 1].1 * SHAPE_SCORE_SCALE);
            let (u1, s1) = (shape[i].0, shape[i].1 * SHAPE_SCORE_SCALE);
            return s0 + (s1 - s0) * (p - u0) / (u1 - u0);
        }
    }
    shape.last().map_or(0, |s| s.1 * SHAPE_SCORE_SCALE)
}

/// Score of one node, 0..=100.
#[inline]
pub fn score(
    strategy: &Strategy,
    resources: &[(usize, i64)],
    allocatable: &[i64],
    requested: &[i64],
    nonzero_requested: &[i64],
    request: &[i64],
    nonzero_request: &[i64],
) -> i64 {
    let mut node_score = 0i64;
    let mut weight_sum = 0i64;
    for &(column, weight) in resources {
        let pod_request = pod_request_for_score(request, nonzero_request, column);
        if column >= FIRST_SCALAR && pod_request == 0 {
            continue;
        }
        let capacity = allocatable[column];
        if capacity == 0 {
            continue;
        }
        let total = allocated_for_score(requested, nonzero_requested, column).saturating_add(pod_request);
        let resource_score = match strategy {
            Strategy::LeastAllocated => least_requested(total, capacity),
            Strategy::MostAllocated => most_requested(total, capacity),
            Strategy::RequestedToCapacityRatio(shape) => {
                let utilization = if total > capacity {
                    MAX_UTILIZATION
                } else {
                    mul_div(total, MAX_UTILIZATION, capacity)
                };
                let s = broken_linear(shape, utilization);
                if s <= 0 {
                    continue;
                }
                s
            }
        };
        node_score += resource_score * weight;
        weight_sum += weight;
    }
    if weight_sum == 0 {
        return 0;
    }
    match strategy {
        Strategy::RequestedToCapacityRatio(_) => (node_score as f64 / weight_sum as f64).round() as i64,
        _ => node_score / weight_sum,
    }
}

/// Columns in which the pod's request is non-zero.
pub fn requested_columns(request: &[i64]) -> Vec<usize> {
    (0..request.len()).filter(|&r| request[r] != 0).collect()
}

/// The requested columns the filter checks: those not in `ignored` (the
/// extended resources of the plugin's `ignoredResources` / `ignoredResourceGroups`).
pub fn checked_columns(requested: &[usize], ignored: &[usize]) -> Vec<usize> {
    requested.iter().copied().filter(|c| !ignored.contains(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EPHEMERAL_STORAGE;

    const GIB: i64 = 1 << 30;

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            allocatable: [i64; 4],
            requested: [i64; 4],
            pods: (i64, i64),
            request: [i64; 4],
            want: Vec<u32>,
        }
        let cases = vec![
            Case {
                name: "fits",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [1000, GIB, 0, 0],
                pods: (110, 3),
                request: [1000, GIB, 0, 0],
                want: vec![],
            },
            Case {
                name: "exactly full",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [3000, 7 * GIB, 0, 0],
                pods: (110, 3),
                request: [1000, GIB, 0, 0],
                want: vec![],
            },
            Case {
                name: "insufficient cpu",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [3500, 0, 0, 0],
                pods: (110, 3),
                request: [1000, GIB, 0, 0],
                want: vec![insufficient(CPU)],
            },
            Case {
                name: "insufficient cpu and memory",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [3500, 8 * GIB, 0, 0],
                pods: (110, 3),
                request: [1000, GIB, 0, 0],
                want: vec![insufficient(CPU), insufficient(MEMORY)],
            },
            Case {
                name: "too many pods",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [0; 4],
                pods: (3, 3),
                request: [0; 4],
                want: vec![TOO_MANY_PODS],
            },
            Case {
                name: "ephemeral storage",
                allocatable: [4000, 8 * GIB, GIB, 0],
                requested: [0, 0, GIB, 0],
                pods: (110, 0),
                request: [0, 0, 1, 0],
                want: vec![insufficient(EPHEMERAL_STORAGE)],
            },
            Case {
                name: "extended resource missing on node",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [0; 4],
                pods: (110, 0),
                request: [0, 0, 0, 1],
                want: vec![FIRST_INSUFFICIENT + 3],
            },
            Case {
                name: "extended resource fits",
                allocatable: [4000, 8 * GIB, 0, 4],
                requested: [0, 0, 0, 3],
                pods: (110, 0),
                request: [0, 0, 0, 1],
                want: vec![],
            },
            Case {
                name: "saturated requests: the node is full, not empty",
                allocatable: [4000, 8 * GIB, 0, 0],
                requested: [i64::MAX, 0, 0, 0],
                pods: (110, 2),
                request: [100, 0, 0, 0],
                want: vec![insufficient(CPU)],
            },
            Case {
                name: "negative allocatable under saturated requests does not wrap",
                allocatable: [-4000, 8 * GIB, 0, 0],
                requested: [i64::MAX, 0, 0, 0],
                pods: (110, 2),
                request: [100, 0, 0, 0],
                want: vec![insufficient(CPU)],
            },
            Case {
                name: "allocatable near i64's range",
                allocatable: [4000, i64::MAX / 4, 0, 0],
                requested: [0, i64::MAX / 4 - GIB, 0, 0],
                pods: (110, 2),
                request: [100, GIB, 0, 0],
                want: vec![],
            },
        ];
        for case in cases {
            let mut got = Vec::new();
            let cols = requested_columns(&case.request);
            let fits = filter(
                &case.allocatable,
                &case.requested,
                case.pods.0,
                case.pods.1,
                &case.request,
                &cols,
                &mut |c| got.push(c),
            );
            assert_eq!(got, case.want, "{}: want {:?} got {:?}", case.name, case.want, got);
            assert_eq!(fits, case.want.is_empty(), "{}", case.name);
        }
    }

    #[test]
    fn score_table() {
        let shape = vec![(0, 0), (100, 10)];
        struct Case {
            name: &'static str,
            strategy: Strategy,
            resources: Vec<(usize, i64)>,
            want: i64,
        }
        // Node: 4000m / 8Gi, already 1000m / 2Gi (non-zero). Pod: 1000m / 2Gi.
        let cases = vec![
            Case {
                name: "least allocated",
                strategy: Strategy::LeastAllocated,
                resources: vec![(CPU, 1), (MEMORY, 1)],
                want: 50,
            },
            Case {
                name: "least allocated cpu-weighted",
                strategy: Strategy::LeastAllocated,
                resources: vec![(CPU, 3), (MEMORY, 1)],
                want: 50,
            },
            Case {
                name: "most allocated",
                strategy: Strategy::MostAllocated,
                resources: vec![(CPU, 1), (MEMORY, 1)],
                want: 50,
            },
            Case {
                name: "rtcr linear",
                strategy: Strategy::RequestedToCapacityRatio(shape.clone()),
                resources: vec![(CPU, 1), (MEMORY, 1)],
                want: 50,
            },
            Case {
                name: "scalar not requested is skipped",
                strategy: Strategy::LeastAllocated,
                resources: vec![(CPU, 1), (3, 5)],
                want: 50,
            },
        ];
        let allocatable = [4000, 8 * GIB, 0, 8];
        let requested = [1000, 2 * GIB, 0, 0];
        let nonzero = [1000, 2 * GIB];
        let request = [1000, 2 * GIB, 0, 0];
        for case in cases {
            let got = score(
                &case.strategy,
                &case.resources,
                &allocatable,
                &requested,
                &nonzero,
                &request,
                &[1000, 2 * GIB],
            );
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
        // Uneven: cpu 3000/4000 used after pod -> 25, memory 2Gi/8Gi -> 75; weights 1:1 -> 50, 3:1 -> 37.
        let requested = [2000, 0, 0, 0];
        let nonzero = [2000, 0];
        let got = score(
            &Strategy::LeastAllocated,
            &[(CPU, 3), (MEMORY, 1)],
            &allocatable,
            &requested,
            &nonzero,
            &request,
            &[1000, 2 * GIB],
        );
        assert_eq!(got, (25 * 3 + 75) / 4);
    }

    /// Rows whose expected score differs by strategy, from upstream's
    /// `least_allocated_test.go`, `most_allocated_test.go` and
    /// `requested_to_capacity_ratio_test.go` (pod: 3000m cpu, 5000 memory;
    /// node: 4000m / 10000, nothing scheduled, unless a row says otherwise).
    /// Least: (capacity − requested) × 100 / capacity per resource; most:
    /// requested × 100 / capacity; RTCR: the shape at utilization, rounded
    /// after the weighted mean; the others truncate it.
    #[test]
    fn score_differs_per_strategy() {
        let least = || Strategy::LeastAllocated;
        let most = || Strategy::MostAllocated;
        let rising = || Strategy::RequestedToCapacityRatio(vec![(0, 0), (100, 10)]);
        let falling = || Strategy::RequestedToCapacityRatio(vec![(0, 10), (100, 0)]);
        let even = vec![(CPU, 1), (MEMORY, 1)];
        let memory_twice = vec![(MEMORY, 2), (CPU, 1)];
        struct Case {
            name: &'static str,
            strategy: Strategy,
            resources: Vec<(usize, i64)>,
            allocatable: [i64; 4],
            requested: [i64; 4],
            request: [i64; 4],
            want: i64,
        }
        let node = [4000, 10000, 0, 0];
        let pod = [3000, 5000, 0, 0];
        let row = |name, strategy, resources: &Vec<(usize, i64)>, want| Case {
            name,
            strategy,
            resources: resources.clone(),
            allocatable: node,
            requested: [0; 4],
            request: pod,
            want,
        };
        let busy = |name, strategy, want| Case {
            allocatable: [10000, 20000, 0, 0],
            requested: [3000, 0, 0, 0],
            ..row(name, strategy, &even, want)
        };
        let over = |name, strategy, want| Case {
            requested: [3000, 0, 0, 0],
            ..row(name, strategy, &even, want)
        };
        let scalar = |name, strategy, want| Case {
            resources: vec![(CPU, 1), (3, 5)],
            allocatable: [4000, 10000, 0, 8],
            requested: [0, 0, 0, 2],
            request: [1000, 0, 0, 2],
            ..row(name, strategy, &even, want)
        };
        let cases = vec![
            // cpu 25, memory 50.
            row("least: (25 + 50) / 2", least(), &even, 37),
            row("most: (75 + 50) / 2", most(), &even, 62),
            row("rtcr, falling shape: 37.5 rounds up", falling(), &even, 38),
            row("rtcr, rising shape: 62.5 rounds up", rising(), &even, 63),
            row("least, memory weighted 2: (25 + 2 × 50) / 3", least(), &memory_twice, 41),
            row("most, memory weighted 2: (75 + 2 × 50) / 3", most(), &memory_twice, 58),
            // Node 10000m / 20000 with 3000m requested: cpu 60% used, memory 25%.
            busy("least, pods scheduled: (40 + 75) / 2", least(), 57),
            busy("most, pods scheduled: (60 + 25) / 2", most(), 42),
            busy("rtcr falling, pods scheduled: 57.5 rounds up", falling(), 58),
            // 6000m asked of 4000m: least scores the resource 0, most caps it at 100.
            over("least, cpu over capacity: (0 + 50) / 2", least(), 25),
            over("most, cpu over capacity: (100 + 50) / 2", most(), 75),
            over("rtcr rising, utilization capped at 100", rising(), 75),
            // The pod asks for 2 of the node's 8 of a scalar resource, 2 already in use.
            scalar("least, scalar requested: (75 + 5 × 50) / 6", least(), 54),
            scalar("most, scalar requested: (25 + 5 × 50) / 6", most(), 45),
            // Exabyte memory (clamped to i64::MAX / 4): capacity × 100 is past i64.
            Case {
                allocatable: [4000, i64::MAX / 4, 0, 0],
                ..row("least, memory near i64's range: (25 + 99) / 2", least(), &even, 62)
            },
            Case {
                allocatable: [4000, i64::MAX / 4, 0, 0],
                requested: [0, i64::MAX / 4, 0, 0],
                ..row("most, memory near i64's range full: (75 + 100) / 2", most(), &even, 87)
            },
            Case {
                allocatable: [4000, i64::MAX / 4, 0, 0],
                ..row(
                    "rtcr rising, memory near i64's range scores 0 and is left out: 75",
                    rising(),
                    &even,
                    75,
                )
            },
            // A saturated sum plus the pod's request saturates: the resource scores as full.
            Case {
                requested: [i64::MAX, 0, 0, 0],
                ..row("least, saturated cpu: (0 + 50) / 2", least(), &even, 25)
            },
            Case {
                requested: [i64::MAX, 0, 0, 0],
                ..row("most, saturated cpu: (100 + 50) / 2", most(), &even, 75)
            },
        ];
        for case in cases {
            let got = score(
                &case.strategy,
                &case.resources,
                &case.allocatable,
                &case.requested,
                &case.requested[..2],
                &case.request,
                &case.request[..2],
            );
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
    }

    #[test]
    fn broken_linear_interpolates() {
        let shape = [(0, 10), (50, 0), (100, 10)];
        assert_eq!(broken_linear(&shape, 0), 100);
        assert_eq!(broken_linear(&shape, 25), 50);
        assert_eq!(broken_linear(&shape, 50), 0);
        assert_eq!(broken_linear(&shape, 75), 50);
        assert_eq!(broken_linear(&shape, 100), 100);
    }
}
