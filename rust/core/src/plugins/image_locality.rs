//! ImageLocality: prefers nodes that already have the pod's container
//! images, each image's size scaled by the fraction of nodes that have it
//! (so a popular image does not heat a few nodes), the sum clamped between
//! a minimum and a per-container maximum (upstream `imagelocality`).

use super::MAX_NODE_SCORE;
use crate::model::Images;

const MB: i64 = 1024 * 1024;
/// Upstream's bounds of the image score range: the size range of most
/// compressed images in registries (90 % of Docker Hub's fall in it).
pub const MIN_THRESHOLD: i64 = 23 * MB;
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Upstream `scaledImageScore`: the image's size times the fraction of nodes that have it.
#[inline]
fn scaled_image_score(images: &Images, id: i32, total_nodes: usize) -> i64 {
    let spread = images.node_counts[id as usize] as f64 / total_nodes as f64;
    (images.sizes[id as usize] as f64 * spread) as i64
}

/// Upstream `calculatePriority`: the sum clamped to `[MIN_THRESHOLD,
/// MAX_CONTAINER_THRESHOLD × containers]`, scaled to 0..=100.
#[inline]
fn calculate_priority(sum: i64, containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * containers;
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max_threshold {
        max_threshold
    } else {
        sum
    };
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// Score of one node (no NormalizeScore: already 0..=100). `pod_images`
/// holds one id per container whose image some node has; a pod with none
/// scores 0 everywhere and never reaches here.
#[inline]
pub fn score(images: &Images, total_nodes: usize, node: usize, pod_images: &[i32], containers: i64) -> i64 {
    // Saturating: a node may report any image size up to i64's range.
    let sum = pod_images
        .iter()
        .filter(|&&id| images.has(node, id))
        .map(|&id| scaled_image_score(images, id, total_nodes))
        .fold(0i64, i64::saturating_add);
    calculate_priority(sum, containers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream `TestImageLocalityPriority`: nodes are lists of (image
    /// names, size in MB); the pod's images are already normalized
    /// (`gcr.io/40` is `gcr.io/40:latest`), init containers and image
    /// volumes listed with the containers.
    #[test]
    fn upstream_table() {
        type Node = &'static [(&'static [&'static str], i64)];
        const N403002000: Node = &[
            (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
            (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
            (&["gcr.io/2000:latest"], 2000),
        ];
        const N25010: Node = &[(&["gcr.io/250:latest"], 250), (&["gcr.io/10:latest", "gcr.io/10:v1"], 10)];
        const N60040900: Node = &[
            (&["gcr.io/600:latest"], 600),
            (&["gcr.io/40:latest"], 40),
            (&["gcr.io/900:latest"], 900),
        ];
        const N300600900: Node = &[
            (&["gcr.io/300:latest"], 300),
            (&["gcr.io/600:latest"], 600),
            (&["gcr.io/900:latest"], 900),
        ];
        const N400030: Node = &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)];
        const N203040: Node = &[
            (&["gcr.io/20:latest"], 20),
            (&["gcr.io/30:latest"], 30),
            (&["gcr.io/40:latest"], 40),
        ];
        const NONE: Node = &[];
        struct Case {
            name: &'static str,
            /// Images of the containers, init containers and image volumes.
            pod: &'static [&'static str],
            containers: i64,
            nodes: &'static [Node],
            want: &'static [i64],
        }
        let cases = [
            Case {
                name: "two images spread on two nodes, prefer the larger image one",
                pod: &["gcr.io/40:latest", "gcr.io/250:latest"],
                containers: 2,
                nodes: &[N403002000, N25010],
                want: &[0, 5],
            },
            Case {
                name: "two images on one node, prefer this node",
                pod: &["gcr.io/40:latest", "gcr.io/300:latest"],
                containers: 2,
                nodes: &[N403002000, N25010],
                want: &[7, 0],
            },
            Case {
                name: "if exceed limit, use limit",
                pod: &["gcr.io/10:latest", "gcr.io/4000:latest"],
                containers: 2,
                nodes: &[N400030, N25010],
                want: &[100, 0],
            },
            Case {
                name: "if exceed limit, use limit (with node which has no images present)",
                pod: &["gcr.io/10:latest", "gcr.io/4000:latest"],
                containers: 2,
                nodes: &[N400030, N25010, NONE],
                want: &[66, 0, 0],
            },
            Case {
                name: "pod with multiple large images, node2 is preferred",
                pod: &["gcr.io/300:latest", "gcr.io/600:latest", "gcr.io/900:latest"],
                containers: 3,
                nodes: &[N60040900, N300600900, NONE],
                want: &[32, 36, 0],
            },
            Case {
                name: "pod with multiple small images",
                pod: &["gcr.io/30:latest", "gcr.io/40:latest"],
                containers: 2,
                nodes: &[N203040, N400030],
                want: &[1, 0],
            },
            Case {
                name: "pod with ImageVolume",
                pod: &["gcr.io/30:latest", "gcr.io/300:latest"],
                containers: 1,
                nodes: &[N300600900, N400030],
                want: &[12, 0],
            },
            Case {
                name: "include InitContainers: two images spread on two nodes, prefer the larger image one",
                pod: &["gcr.io/300:latest", "gcr.io/30:latest"],
                containers: 2,
                nodes: &[N403002000, N203040],
                want: &[6, 0],
            },
        ];
        for case in cases {
            // Intern names as the snapshot does: per node a sorted, deduplicated id row;
            // per image its first size and how many nodes have it.
            let mut names: Vec<&str> = Vec::new();
            let (mut sizes, mut counts, mut offsets, mut ids) = (Vec::new(), Vec::new(), vec![0i64], Vec::new());
            for node in case.nodes {
                let mut row: Vec<i32> = Vec::new();
                for &(image_names, size) in *node {
                    for &n in image_names {
                        let id = names.iter().position(|&x| x == n).unwrap_or_else(|| {
                            names.push(n);
                            sizes.push(size * MB);
                            counts.push(0);
                            names.len() - 1
                        }) as i32;
                        if !row.contains(&id) {
                            row.push(id);
                            counts[id as usize] += 1;
                        }
                    }
                }
                row.sort_unstable();
                ids.extend(row);
                offsets.push(ids.len() as i64);
            }
            let images = Images {
                offsets: &offsets,
                ids: &ids,
                sizes: &sizes,
                node_counts: &counts,
            };
            let pod: Vec<i32> = case
                .pod
                .iter()
                .filter_map(|n| names.iter().position(|x| x == n).map(|i| i as i32))
                .collect();
            let got: Vec<i64> = (0..case.nodes.len())
                .map(|node| score(&images, case.nodes.len(), node, &pod, case.containers))
                .collect();
            assert_eq!(got, case.want, "{}: want {:?} got {:?}", case.name, case.want, got);
        }
    }
}
