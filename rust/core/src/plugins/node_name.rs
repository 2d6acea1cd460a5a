//! NodeName: a pod that names a node (`spec.nodeName`) fits only that node.

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, Nodes, PluginId};

pub const NODE_NAME: u32 = reason_code(PluginId::NodeName, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::unresolvable("node(s) didn't match the requested node name")];

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
