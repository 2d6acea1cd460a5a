//! Score normalization as upstream `helper.DefaultNormalizeScore`: scale raw
//! scores so the highest becomes 100 (integer arithmetic), optionally reversed.

use super::MAX_NODE_SCORE;

/// Normalize one raw score given the maximum raw score over the feasible nodes.
#[inline]
pub fn default_normalize(raw: i64, max_raw: i64, reverse: bool) -> i64 {
    if max_raw == 0 {
        return if reverse { MAX_NODE_SCORE } else { 0 };
    }
    // A raw score near i64's range times 100 does not fit in i64 (then i128).
    let score = super::node_resources_fit::mul_div(raw, MAX_NODE_SCORE, max_raw);
    if reverse {
        MAX_NODE_SCORE - score
    } else {
        score
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases = [
            ("all zero", 0, 0, false, 0),
            ("all zero reversed", 0, 0, true, 100),
            ("max", 7, 7, false, 100),
            ("truncates", 1, 3, false, 33),
            ("reversed", 1, 3, true, 67),
            ("zero reversed", 0, 3, true, 100),
            ("raw past i64 / 100", i64::MAX, i64::MAX, false, 100),
        ];
        for (name, raw, max, reverse, want) in cases {
            assert_eq!(default_normalize(raw, max, reverse), want, "{name}");
        }
    }
}
