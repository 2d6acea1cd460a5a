//! NodeName: a pod that names a node (`spec.nodeName`) fits only that node.

use crate::model::Nodes;
use crate::reasons::{FEASIBLE, NODE_NAME};

pub const NAME: &str = "NodeName";

/// `wanted` is the interned node name the pod asks for, or -1.
pub fn filter(nodes: &Nodes, node: usize, wanted: i32) -> u32 {
    if wanted < 0 || nodes.names[node] == wanted {
        FEASIBLE
    } else {
        NODE_NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::NodeBuilder;

    #[test]
    fn table() {
        let mut b = NodeBuilder::default();
        b.node(|n| n.name = 5);
        let owned = b.build();
        let nodes = owned.view();
        for (name, wanted, want) in [
            ("no node name", -1, FEASIBLE),
            ("same name", 5, FEASIBLE),
            ("other name", 6, NODE_NAME),
        ] {
            assert_eq!(filter(&nodes, 0, wanted), want, "{name}");
        }
    }
}
