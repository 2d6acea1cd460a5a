//! NodePorts: a pod's host ports must be free on the node. A (protocol, port)
//! pair conflicts when either side binds the wildcard IP or both bind the same IP.

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, row, Nodes, PluginId, Ports};

pub const NODE_PORTS: u32 = reason_code(PluginId::NodePorts, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::resolvable("node(s) didn't have free ports for the requested pod ports")];

/// One bound host port: (protocol, interned IP, port).
pub type HostPort = (u8, i32, i32);

#[inline]
pub fn conflict(wildcard: i32, a: HostPort, b: HostPort) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1 == wildcard || b.1 == wildcard || a.1 == b.1)
}

/// Whether pod `pod`'s host ports fit on `node`, given the node's bound ports,
/// those placed earlier in the batch (`placed`) and those a preemption dry
/// run's victims would free (`freed`: each frees one bound copy).
pub fn filter(nodes: &Nodes, node: usize, pod_ports: &Ports, pod: usize, placed: &[HostPort], freed: &[HostPort]) -> u32 {
    let used = &nodes.used_ports;
    let wildcard = nodes.wildcard_ip;
    let bound = || {
        row(used.offsets, node)
            .map(|j| (used.protocols[j], used.ips[j], used.ports[j]))
            .chain(placed.iter().copied())
    };
    for i in row(pod_ports.offsets, pod) {
        let want = (pod_ports.protocols[i], pod_ports.ips[i], pod_ports.ports[i]);
        if want.2 <= 0 {
            continue;
        }
        let taken = if freed.is_empty() {
            bound().any(|q| conflict(wildcard, want, q))
        } else {
            bound().any(|q| conflict(wildcard, want, q) && copies(q, bound()) > copies(q, freed.iter().copied()))
        };
        if taken {
            return NODE_PORTS;
        }
    }
    FEASIBLE
}

fn copies(port: HostPort, of: impl Iterator<Item = HostPort>) -> usize {
    of.filter(|&p| p == port).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PROTOCOL_TCP, PROTOCOL_UDP};
    use crate::test_support::{NodeBuilder, OwnedPorts};

    const ANY: i32 = 1;
    const IP1: i32 = 2;
    const IP2: i32 = 3;

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            used: Vec<HostPort>,
            placed: Vec<HostPort>,
            freed: Vec<HostPort>,
            want_ports: Vec<HostPort>,
            want: u32,
        }
        let cases = vec![
            Case {
                name: "no ports",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![],
                want: FEASIBLE,
            },
            Case {
                name: "same port same protocol",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![(PROTOCOL_TCP, ANY, 80)],
                want: NODE_PORTS,
            },
            Case {
                name: "other protocol",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![(PROTOCOL_UDP, ANY, 80)],
                want: FEASIBLE,
            },
            Case {
                name: "different IPs",
                used: vec![(PROTOCOL_TCP, IP1, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![(PROTOCOL_TCP, IP2, 80)],
                want: FEASIBLE,
            },
            Case {
                name: "wildcard vs specific",
                used: vec![(PROTOCOL_TCP, IP1, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![(PROTOCOL_TCP, ANY, 80)],
                want: NODE_PORTS,
            },
            Case {
                name: "specific vs wildcard",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![(PROTOCOL_TCP, IP1, 80)],
                want: NODE_PORTS,
            },
            Case {
                name: "placed earlier in the batch",
                used: vec![],
                placed: vec![(PROTOCOL_TCP, ANY, 8080)],
                freed: vec![],
                want_ports: vec![(PROTOCOL_TCP, ANY, 8080)],
                want: NODE_PORTS,
            },
            Case {
                name: "other port",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![],
                freed: vec![],
                want_ports: vec![(PROTOCOL_TCP, ANY, 81)],
                want: FEASIBLE,
            },
            Case {
                name: "the victim holding the port is evicted",
                used: vec![(PROTOCOL_TCP, IP1, 80)],
                placed: vec![],
                freed: vec![(PROTOCOL_TCP, IP1, 80)],
                want_ports: vec![(PROTOCOL_TCP, ANY, 80)],
                want: FEASIBLE,
            },
            Case {
                name: "one of two copies is freed",
                used: vec![(PROTOCOL_TCP, IP1, 80), (PROTOCOL_TCP, IP1, 80)],
                placed: vec![],
                freed: vec![(PROTOCOL_TCP, IP1, 80)],
                want_ports: vec![(PROTOCOL_TCP, IP1, 80)],
                want: NODE_PORTS,
            },
            Case {
                name: "freeing another port does not help",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![],
                freed: vec![(PROTOCOL_UDP, ANY, 80)],
                want_ports: vec![(PROTOCOL_TCP, ANY, 80)],
                want: NODE_PORTS,
            },
            Case {
                name: "a port placed in the batch is not freed by a victim",
                used: vec![(PROTOCOL_TCP, ANY, 80)],
                placed: vec![(PROTOCOL_TCP, ANY, 80)],
                freed: vec![(PROTOCOL_TCP, ANY, 80)],
                want_ports: vec![(PROTOCOL_TCP, ANY, 80)],
                want: NODE_PORTS,
            },
        ];
        for case in cases {
            let mut b = NodeBuilder {
                wildcard_ip: ANY,
                ..NodeBuilder::default()
            };
            b.node(|n| n.ports = case.used.clone());
            let owned = b.build();
            let pod = OwnedPorts::new(vec![case.want_ports.clone()]);
            let got = filter(&owned.view(), 0, &pod.view(), 0, &case.placed, &case.freed);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
    }
}
