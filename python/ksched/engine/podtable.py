"""The pods the pod-level plugins read (InterPodAffinity, PodTopologySpread).

Owns one row per bound pod (node index, namespace, interned label set,
interned affinity term set, terminating), kept current in place as pods come
and go (O(changes)), and compiling it with a batch's pending pods into the
engine's ``table`` arrays. Whole label sets and whole term sets are
interned: the pods of one workload share one of each, so the engine matches
a selector once per label set, and per batch only the distinct term sets are
compiled (their namespaceSelectors resolved against the namespaces known now).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.core_types import PodTableArrays, VictimArrays
from ksched.engine.disruption_budgets import DisruptionBudget
from ksched.engine.pod_level import AffinityTerm, PodAffinityTerms, PodInfo, SpreadConstraint
from ksched.engine.pods import CountedRequests, HostPort
from ksched.engine.quantity import saturated
from ksched.engine.selectors import LabelSelector, selector_matches

HOSTNAME_LABEL = "kubernetes.io/hostname"
# Interned term set: the owning pod's namespace (terms without namespaces mean it) and the terms.
TermSetKey = tuple[str, PodAffinityTerms]


@dataclass(frozen=True, slots=True)
class Evictable:
    """What preemption needs of a bound pod besides its labels."""

    priority: int
    start_time: float
    requests: CountedRequests
    ports: tuple[HostPort, ...] = ()
    # Being deleted by a scheduler's preemption (upstream podTerminatingByPreemption):
    # a preemptor nominated to its node waits for it instead of evicting more.
    preempted: bool = False


@dataclass
class PendingPod:
    """A pending pod's row in one engine call."""

    info: PodInfo
    spread: tuple[SpreadConstraint, ...]
    system_default: bool = False


@dataclass
class _Compiler:
    """Selectors and terms of one engine call, as flat columns."""

    strings: Any
    namespaces: Mapping[str, Mapping[str, str]]
    selector_ids: dict[LabelSelector | None, int] = field(default_factory=dict)
    term_ids: dict[tuple[str, AffinityTerm], int] = field(default_factory=dict)
    cols: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (
            "sel_nothing",
            "sel_keys",
            "sel_operators",
            "sel_values",
            "term_selectors",
            "term_topology_keys",
            "term_weights_pod",
            "term_all_namespaces",
            "term_namespaces",
            "ts_terms",
        ):
            self.cols[name] = []
        for name in ("sel_offsets", "sel_value_offsets", "term_namespace_offsets", "ts_offsets"):
            self.cols[name] = [0]

    def copy(self) -> _Compiler:
        """A compiler holding the same selectors and terms, which the caller can add to
        without changing this one."""
        out = _Compiler(self.strings, self.namespaces)
        out.selector_ids, out.term_ids = dict(self.selector_ids), dict(self.term_ids)
        out.cols = {k: list(v) for k, v in self.cols.items()}
        return out

    def selector(self, sel: LabelSelector | None) -> int:
        found = self.selector_ids.get(sel)
        if found is not None:
            return found
        c, s = self.cols, self.strings
        c["sel_nothing"].append(int(sel is None))
        for r in sel or ():
            c["sel_keys"].append(s(r.key))
            c["sel_operators"].append(_core.POD_SELECTOR_OPERATORS[r.operator])
            c["sel_values"].extend(s(v) for v in r.values)
            c["sel_value_offsets"].append(len(c["sel_values"]))
        c["sel_offsets"].append(len(c["sel_keys"]))
        self.selector_ids[sel] = len(self.selector_ids)
        return self.selector_ids[sel]

    def term(self, owner_namespace: str, t: AffinityTerm) -> int:
        k = (owner_namespace, t)
        found = self.term_ids.get(k)
        if found is not None:
            return found
        c, s = self.cols, self.strings
        c["term_selectors"].append(self.selector(t.selector))
        c["term_topology_keys"].append(s(t.topology_key))
        c["term_weights_pod"].append(t.weight)
        everything = t.namespace_selector == ()
        c["term_all_namespaces"].append(int(everything))
        names: set[str] = set()
        if not everything:
            if not t.namespaces and t.namespace_selector is None:
                names = {owner_namespace}
            else:
                names = set(t.namespaces)
                if t.namespace_selector:
                    names |= {
                        ns
                        for ns, labels in self.namespaces.items()
                        if selector_matches(t.namespace_selector, dict(labels))
                    }
        c["term_namespaces"].extend(sorted(int(s(n)) for n in names))
        c["term_namespace_offsets"].append(len(c["term_namespaces"]))
        self.term_ids[k] = len(self.term_ids)
        return self.term_ids[k]

    def term_set(self, key: TermSetKey) -> None:
        namespace, terms = key
        for lst in terms.lists():
            self.cols["ts_terms"].extend(self.term(namespace, t) for t in lst)
            self.cols["ts_offsets"].append(len(self.cols["ts_terms"]))


class PodTable:
    """Bound pods as rows (see the module docstring); ``strings`` is the snapshot's interner."""

    def __init__(self, strings: Any) -> None:
        self.strings = strings
        self.rows: dict[str, int] = {}
        self._free: list[int] = []
        self._high = 0
        cap = 64
        self.node = np.full(cap, -1, dtype=np.int64)
        self.namespace = np.zeros(cap, dtype=np.int32)
        self.label_set = np.zeros(cap, dtype=np.int64)
        self.term_set = np.full(cap, -1, dtype=np.int64)
        self.terminating = np.zeros(cap, dtype=np.uint8)
        self._label_set_ids: dict[tuple[tuple[str, str], ...], int] = {}
        self._ls = {"ls_offsets": [0], "ls_keys": [], "ls_values": []}
        self._ls_arrays: dict[str, npt.NDArray[Any]] | None = None
        self._term_set_ids: dict[TermSetKey, int] = {}
        self.term_set_keys: list[TermSetKey] = []
        # The term sets last compiled for an engine call (``_compiled_terms``).
        self._compiled: tuple[tuple[tuple[int, ...], Any], _Compiler] | None = None
        # Bound pods with affinity terms: while none, pods without their own
        # constraints need no table at all.
        self.with_terms = 0
        # Per row: pod key, labels and what preemption needs (None: not evictable).
        self.keys: dict[int, str] = {}
        self.infos: dict[int, PodInfo] = {}
        self.evictable: dict[int, Evictable] = {}
        self.priority = np.zeros(cap, dtype=np.int64)
        # Claim (``namespace/name``) -> the rows of the pods whose volumes use it.
        self._claim_rows: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def interned(self) -> int:
        """How many label sets and term sets are interned: every one a pod counted here (or a
        pending pod compiled here) has had since the table was built, gone pods' included."""
        return len(self._label_set_ids) + len(self.term_set_keys)

    def _label_set_id(self, labels: tuple[tuple[str, str], ...]) -> int:
        found = self._label_set_ids.get(labels)
        if found is not None:
            return found
        s = self.strings
        keyed = sorted((int(s(k)), int(s(v))) for k, v in labels)
        self._ls["ls_keys"].extend(k for k, _ in keyed)
        self._ls["ls_values"].extend(v for _, v in keyed)
        self._ls["ls_offsets"].append(len(self._ls["ls_keys"]))
        self._ls_arrays = None
        self._label_set_ids[labels] = len(self._label_set_ids)
        return self._label_set_ids[labels]

    def _term_set_id(self, info: PodInfo) -> int:
        if info.affinity is None:
            return -1
        key = (info.namespace, info.affinity)
        found = self._term_set_ids.get(key)
        if found is None:
            found = self._term_set_ids[key] = len(self.term_set_keys)
            self.term_set_keys.append(key)
        return found

    def _grow(self) -> None:
        cap = len(self.node) * 2
        for name, fill in (
            ("node", -1),
            ("namespace", 0),
            ("label_set", 0),
            ("term_set", -1),
            ("terminating", 0),
            ("priority", 0),
        ):
            old = getattr(self, name)
            new = np.full(cap, fill, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def add(self, key: str, node: int, info: PodInfo, evictable: Evictable | None = None) -> None:
        """Count (or re-count) a bound pod on node index ``node``."""
        self.remove(key)
        if self._free:
            row = self._free.pop()
        else:
            if self._high == len(self.node):
                self._grow()
            row = self._high
            self._high += 1
        self.rows[key] = row
        self.node[row] = node
        self.namespace[row] = self.strings(info.namespace)
        self.label_set[row] = self._label_set_id(info.labels)
        self.term_set[row] = self._term_set_id(info)
        self.terminating[row] = int(info.terminating)
        self.with_terms += int(self.term_set[row] >= 0)
        self.keys[row] = key
        self.infos[row] = info
        for claim in info.claims:
            self._claim_rows.setdefault(claim, set()).add(row)
        self.priority[row] = evictable.priority if evictable is not None else 2**62
        if evictable is not None:
            self.evictable[row] = evictable

    def set_evictable(self, key: str, evictable: Evictable) -> None:
        """What preemption reads of a counted pod changed (its start time): its labels and terms did not."""
        row = self.rows.get(key)
        if row is not None:
            self.evictable[row] = evictable
            self.priority[row] = evictable.priority

    def add_many(self, pods: Sequence[tuple[str, int, PodInfo, Evictable | None]]) -> None:
        """:meth:`add` for each of ``pods`` (a batch's placements), the table's columns
        written once: the same rows, ids and counts as adding them one by one."""
        keys = [key for key, _, _, _ in pods]
        if len(set(keys)) != len(keys) or any(key in self.rows for key in keys):
            for pod in pods:  # re-counted pods: each removed first, as add does
                self.add(*pod)
            return
        while self._high + max(0, len(pods) - len(self._free)) > len(self.node):
            self._grow()
        rows, nodes, namespaces, label_sets, term_sets, terminating, priorities = [], [], [], [], [], [], []
        # Namespace, label set and term set ids by PodInfo: the pods of one shape share it.
        ids: dict[int, tuple[PodInfo, int, int, int]] = {}
        for key, node, info, evictable in pods:
            if self._free:
                row = self._free.pop()
            else:
                row = self._high
                self._high += 1
            self.rows[key] = row
            rows.append(row)
            nodes.append(node)
            known = ids.get(id(info))
            if known is None:
                known = ids[id(info)] = (
                    info,
                    self.strings(info.namespace),
                    self._label_set_id(info.labels),
                    self._term_set_id(info),
                )
            _, namespace, label_set, term_set = known
            namespaces.append(namespace)
            label_sets.append(label_set)
            term_sets.append(term_set)
            terminating.append(int(info.terminating))
            self.with_terms += int(term_set >= 0)
            self.keys[row] = key
            self.infos[row] = info
            for claim in info.claims:
                self._claim_rows.setdefault(claim, set()).add(row)
            priorities.append(evictable.priority if evictable is not None else 2**62)
            if evictable is not None:
                self.evictable[row] = evictable
        at = np.asarray(rows, dtype=np.int64)
        self.node[at] = nodes
        self.namespace[at] = namespaces
        self.label_set[at] = label_sets
        self.term_set[at] = term_sets
        self.terminating[at] = terminating
        self.priority[at] = priorities

    def remove(self, key: str) -> None:
        row = self.rows.pop(key, None)
        if row is None:
            return
        self.with_terms -= int(self.term_set[row] >= 0)
        self.node[row] = -1
        self.term_set[row] = -1
        self.keys.pop(row, None)
        info = self.infos.pop(row, None)
        for claim in info.claims if info is not None else ():
            users = self._claim_rows.get(claim)
            if users is not None:
                users.discard(row)
                if not users:
                    del self._claim_rows[claim]
        self.evictable.pop(row, None)
        self._free.append(row)

    def claim_users(self, claim: str) -> list[int]:
        """The rows (in ``engine_table``'s compacted order) of the pods that use ``claim``."""
        rows = self._claim_rows.get(claim)
        if not rows:
            return []
        rank = np.cumsum(self.node[: self._high] >= 0) - 1
        return sorted(int(rank[r]) for r in rows)

    def claims_on_nodes(self) -> dict[str, list[int]]:
        """Each claim bound pods use, with the node indices of those pods."""
        return {claim: [int(self.node[r]) for r in rows] for claim, rows in self._claim_rows.items()}

    def label_set_arrays(self) -> dict[str, npt.NDArray[Any]]:
        if self._ls_arrays is None:
            self._ls_arrays = {
                "ls_offsets": np.asarray(self._ls["ls_offsets"], dtype=np.int64),
                "ls_keys": np.asarray(self._ls["ls_keys"], dtype=np.int32),
                "ls_values": np.asarray(self._ls["ls_values"], dtype=np.int32),
            }
        return self._ls_arrays

    def engine_table(
        self,
        pending: Sequence[PendingPod],
        namespaces: Mapping[str, Mapping[str, str]],
        *,
        required: bool = False,
        nominated: Sequence[PodInfo] = (),
    ) -> PodTableArrays | None:
        """The engine's ``pods["table"]`` for a batch, or None when no plugin has anything
        to act on (``required``: the batch's claims need one). ``nominated`` are pods
        outside the batch nominated to a node: rows after the pending pods', counted
        on their node for pods of lower or equal priority (the engine's reservations)."""
        if (
            not required
            and not self.with_terms
            and not any(p.info.affinity is not None or p.spread for p in pending)
        ):
            return None
        high = self._high
        alive = self.node[:high] >= 0
        infos = [p.info for p in pending] + list(nominated)
        p_ns = np.asarray([self.strings(i.namespace) for i in infos], dtype=np.int32)
        p_ls = np.asarray([self._label_set_id(i.labels) for i in infos], dtype=np.int64)
        p_ts = np.asarray([self._term_set_id(i) for i in infos], dtype=np.int64)
        term_sets = np.concatenate((self.term_set[:high][alive], p_ts))
        used = tuple(int(t) for t in np.unique(term_sets) if t >= 0)
        compiler, engine_ids = self._compiled_terms(used, namespaces)
        sp: dict[str, list[int]] = {
            k: []
            for k in (
                "sp_max_skew",
                "sp_min_domains",
                "sp_topology_keys",
                "sp_hard",
                "sp_selectors",
                "sp_honor_affinity",
                "sp_honor_taints",
            )
        }
        sp_offsets = [0]
        for p in pending:
            for c in p.spread:
                sp["sp_max_skew"].append(c.max_skew)
                sp["sp_min_domains"].append(c.min_domains)
                sp["sp_topology_keys"].append(self.strings(c.topology_key))
                sp["sp_hard"].append(int(c.hard))
                sp["sp_selectors"].append(compiler.selector(c.selector))
                sp["sp_honor_affinity"].append(int(c.honor_affinity))
                sp["sp_honor_taints"].append(int(c.honor_taints))
            sp_offsets.append(len(sp["sp_max_skew"]))
        u8 = {
            "sel_nothing",
            "sel_operators",
            "term_all_namespaces",
            "sp_hard",
            "sp_honor_affinity",
            "sp_honor_taints",
        }
        i32 = {"sel_keys", "sel_values", "term_topology_keys", "term_namespaces", "sp_topology_keys"}

        def dtype(name: str) -> type[np.generic]:
            return np.uint8 if name in u8 else np.int32 if name in i32 else np.int64

        out: dict[str, Any] = {k: np.asarray(v, dtype=dtype(k)) for k, v in {**compiler.cols, **sp}.items()}
        out.update(self.label_set_arrays())
        out.update(
            {
                "bound": int(alive.sum()),
                "pt_nodes": np.ascontiguousarray(self.node[:high][alive]),
                "pt_namespaces": np.concatenate((self.namespace[:high][alive], p_ns)),
                "pt_label_sets": np.concatenate((self.label_set[:high][alive], p_ls)),
                "pt_term_sets": np.where(term_sets >= 0, engine_ids[term_sets], -1).astype(np.int64),
                "pt_terminating": np.concatenate(
                    (self.terminating[:high][alive], np.zeros(len(infos), dtype=np.uint8))
                ),
                "sp_offsets": np.asarray(sp_offsets, dtype=np.int64),
                "sp_system_default": np.asarray([int(p.system_default) for p in pending], dtype=np.uint8),
                "hostname_key": int(self.strings(HOSTNAME_LABEL)),
            }
        )
        # Every key of PodTableArrays, as the binding checks: the columns above and the compiler's.
        return cast(PodTableArrays, out)

    def _compiled_terms(
        self, used: tuple[int, ...], namespaces: Mapping[str, Mapping[str, str]]
    ) -> tuple[_Compiler, npt.NDArray[np.int64]]:
        """A compiler holding the term sets ``used`` (sorted ids), in that order, and each id's
        index among them. Compiling them again on every engine call cost 90 ms a call at
        150,000 bound pods with 2,417 distinct anti-affinity term sets, whether the call placed
        1 pod or 200; the compiled columns are kept while the term sets and the namespaces'
        labels (a term's namespaceSelector reads them) stay the same, and the call gets a copy
        to add its own selectors to."""
        labels = tuple((ns, tuple(sorted(v.items()))) for ns, v in sorted(namespaces.items()))
        key = (used, labels)
        if self._compiled is None or self._compiled[0] != key:
            compiler = _Compiler(self.strings, namespaces)
            for ts in used:
                compiler.term_set(self.term_set_keys[ts])
            self._compiled = (key, compiler)
        engine_ids = np.full(len(self.term_set_keys) + 1, -1, dtype=np.int64)
        engine_ids[list(used)] = np.arange(len(used), dtype=np.int64)
        return self._compiled[1].copy(), engine_ids

    def victims(
        self,
        below: int,
        budgets: Sequence[DisruptionBudget],
        strings: Any,
        resources: Any,
        with_rows: bool,
    ) -> tuple[VictimArrays, list[str]]:
        """The engine's ``Victims`` arrays for the evictable bound pods of priority
        below ``below``, and their keys. Rows index the compacted pod table (the
        order ``engine_table`` uses) when ``with_rows``."""
        high = self._high
        alive = self.node[:high] >= 0
        rank = np.cumsum(alive) - 1
        chosen = [
            int(r) for r in np.nonzero(alive & (self.priority[:high] < below))[0] if int(r) in self.evictable
        ]
        width = len(resources)
        requests = np.zeros(len(chosen) * width, dtype=np.int64)
        port_offsets = [0]
        ports: list[tuple[int, int, int]] = []
        pdb_offsets = [0]
        pdbs: list[int] = []
        starts = []
        for i, r in enumerate(chosen):
            e = self.evictable[r]
            for resource, v in e.requests.requests.items():
                requests[i * width + resources(resource)] = saturated(v)
            ports.extend((_core.PROTOCOLS[p.protocol], int(strings(p.ip)), p.port) for p in e.ports)
            port_offsets.append(len(ports))
            info = self.infos[r]
            name = self.keys[r].rsplit("/", 1)[-1]
            labels = dict(info.labels)
            pdbs.extend(k for k, b in enumerate(budgets) if b.covers(info.namespace, name, labels))
            pdb_offsets.append(len(pdbs))
            starts.append(int(e.start_time * 1000))
        out: VictimArrays = {
            "victims": len(chosen),
            "v_rows": (rank[chosen] if with_rows else np.full(len(chosen), -1)).astype(np.int64),
            "v_nodes": self.node[chosen].astype(np.int64),
            "v_priorities": self.priority[chosen].astype(np.int64),
            "v_requests": requests,
            "v_start_times": np.asarray(starts, dtype=np.int64),
            "v_terminating": np.asarray([self.evictable[r].preempted for r in chosen], dtype=np.uint8),
            "v_port_offsets": np.asarray(port_offsets, dtype=np.int64),
            "v_port_protocols": np.asarray([p[0] for p in ports], dtype=np.uint8),
            "v_port_ips": np.asarray([p[1] for p in ports], dtype=np.int32),
            "v_port_ports": np.asarray([p[2] for p in ports], dtype=np.int32),
            "v_pdb_offsets": np.asarray(pdb_offsets, dtype=np.int64),
            "v_pdbs": np.asarray(pdbs, dtype=np.int64),
            "pdb_allowed": np.asarray([b.disruptions_allowed for b in budgets], dtype=np.int64),
        }
        return out, [self.keys[r] for r in chosen]

    def min_evictable_priority(self) -> int | None:
        """The lowest priority of a bound pod preemption could evict (None: there is none)."""
        high = self._high
        alive = self.priority[:high][self.node[:high] >= 0]
        low = int(alive.min()) if len(alive) else None
        return low if low is not None and low < 2**62 else None
