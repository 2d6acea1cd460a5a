//! Selection: the highest total wins; ties are broken by a seeded hash of
//! (pod, node) so results are reproducible for a given seed and independent
//! of the order of the node table.

/// SplitMix64 finalizer (Steele, Lea, Flood 2014): a cheap, well-mixed 64-bit hash.
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Tie-break key of placing the pod with `pod_key` on the node with `node_key`.
#[inline]
pub fn tie_key(seed: u64, pod_key: u64, node_key: u64) -> u64 {
    splitmix64(seed ^ splitmix64(pod_key ^ splitmix64(node_key)))
}

/// Running best candidate.
#[derive(Clone, Copy, Debug)]
pub struct Best {
    pub node: usize,
    pub total: f64,
    pub tie: u64,
}

impl Best {
    /// Offer a candidate; keeps the higher total, then the higher tie key.
    #[inline]
    pub fn offer(best: &mut Option<Best>, node: usize, total: f64, tie: impl FnOnce() -> u64) {
        match best {
            None => *best = Some(Best { node, total, tie: tie() }),
            Some(b) if total > b.total => *best = Some(Best { node, total, tie: tie() }),
            Some(b) if total == b.total => {
                let t = tie();
                if t > b.tie {
                    *best = Some(Best { node, total, tie: t });
                }
            }
            Some(_) => {}
        }
    }
}

/// The feasible node with the highest total; among equal totals, the highest
/// tie key (the first such node if keys collide). Two flat passes: the maximum,
/// then the tie keys of the nodes that reach it.
pub fn select(totals: &[f64], feasible: usize, tie: impl Fn(usize) -> u64) -> Option<Best> {
    if feasible == 0 {
        return None;
    }
    const LANES: usize = 8;
    let mut lanes = [f64::NEG_INFINITY; LANES];
    let chunks = totals.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &t) in lanes.iter_mut().zip(c) {
            *l = if t > *l { t } else { *l };
        }
    }
    let max = lanes.iter().chain(rest).fold(f64::NEG_INFINITY, |a, &t| if t > a { t } else { a });
    if max == f64::NEG_INFINITY {
        // No feasible total is a number: every one is NaN (infeasible nodes hold -inf, which
        // must not be taken for the maximum). The scores are finite, so this is a bug upstream
        // of here; a feasible node is still placed on (unscored, by its tie key), never lost
        // to a "fits nowhere" that names no reason.
        return totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_nan())
            .map(|(node, _)| Best {
                node,
                total: f64::NAN,
                tie: tie(node),
            })
            .max_by_key(|b| b.tie);
    }
    let mut best: Option<Best> = None;
    for (node, &t) in totals.iter().enumerate() {
        if t == max {
            Best::offer(&mut best, node, max, || tie(node));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_known_values() {
        // Reference values of SplitMix64 seeded with 0 (first two outputs).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn select_table() {
        let nan = f64::NAN;
        let inf = f64::NEG_INFINITY;
        // (name, totals with infeasible nodes at -inf, feasible count, want)
        let cases: [(&str, Vec<f64>, usize, Option<usize>); 4] = [
            ("highest total", vec![1.0, 3.0, inf], 2, Some(1)),
            ("none feasible", vec![inf, inf], 0, None),
            ("NaN totals still place, by tie key", vec![nan, inf, nan], 2, Some(2)),
            ("a finite total beats NaN", vec![nan, 0.0, nan], 3, Some(1)),
        ];
        for (name, totals, feasible, want) in cases {
            let got = select(&totals, feasible, |node| node as u64).map(|b| b.node);
            assert_eq!(got, want, "{name}: want {want:?} got {got:?}");
        }
    }

    #[test]
    fn higher_total_wins_then_tie_key() {
        let mut best = None;
        Best::offer(&mut best, 0, 10.0, || 5);
        Best::offer(&mut best, 1, 12.0, || 1);
        Best::offer(&mut best, 2, 12.0, || 3);
        Best::offer(&mut best, 3, 12.0, || 2);
        Best::offer(&mut best, 4, 11.0, || 100);
        assert_eq!(best.map(|b| b.node), Some(2));
    }
}
