"""The engine crate's layering, checked like import-linter checks the Python packages.

Module edges come from the crate's ``use`` paths (``crate::``, ``super::`` and
child modules), comments and ``#[cfg(test)]`` modules left out (inline, or in
files of their own): a file is a module (``a/b.rs`` and ``a/b/mod.rs`` are
``a::b``), and a path counts as an edge to the longest module it names.
``model`` (the input tables) must be a leaf, and no modules may form a cycle.
Neither the engine crate nor the wire-format decoders (``rust/wire``) may
depend on PyO3: ``cargo test`` covers them without libpython.
"""

from __future__ import annotations

import re
from pathlib import Path

RUST = Path(__file__).resolve().parents[2] / "rust"
CRATE = RUST / "core" / "src"
_COMMENT = re.compile(r"//[^\n]*")
_TEST_BLOCK = re.compile(r"#\[cfg\(test\)\]\s*mod \w+ \{.*", re.S)
_TEST_DECL = re.compile(r"#\[cfg\(test\)\]\s*(?:pub\(crate\) )?mod (\w+);")
_USE = re.compile(r"\buse\s+([^;]+);")
_INLINE = re.compile(r"\b((?:crate|super)::[\w:]+)")


def _modules() -> dict[str, Path]:
    out = {}
    for path in CRATE.rglob("*.rs"):
        parts = list(path.relative_to(CRATE).with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts.pop()
        out["::".join(parts)] = path
    # Test-only modules in files of their own (`#[cfg(test)] mod tests;`), and their children.
    test_only = {
        "::".join([*([module] if module else []), name])
        for module, path in out.items()
        for name in _TEST_DECL.findall(_COMMENT.sub("", path.read_text()))
    }
    return {m: p for m, p in out.items() if not any(m == t or m.startswith(t + "::") for t in test_only)}


def _paths(prefix: list[str], tree: str) -> list[list[str]]:
    """Expand a use tree (``a::{b, c::{d}}``) into full paths."""
    tree = tree.strip()
    if "{" not in tree:
        return [prefix + [p for p in tree.split(" as ")[0].split("::") if p and p != "self"]]
    head, body = tree.split("{", 1)
    prefix = prefix + [p for p in head.split("::") if p]
    parts, depth, current = [], 0, ""
    for ch in body[: body.rindex("}")]:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for part in parts if part.strip() for p in _paths(prefix, part)]


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        src = _TEST_DECL.sub("", _TEST_BLOCK.sub("", _COMMENT.sub("", path.read_text())))
        here = module.split("::") if module else []
        for found in _USE.findall(src) + _INLINE.findall(src):
            use = found.strip()
            if use.startswith("crate::"):
                base, rest = [], use.removeprefix("crate::")
            elif use.startswith("super::"):
                base, rest = here[:-1], use.removeprefix("super::")
                while rest.startswith("super::"):
                    base, rest = base[:-1], rest.removeprefix("super::")
            elif "::".join([*here, use.split("::")[0].strip("{ ")]) in mods:
                base, rest = list(here), use
            else:
                continue
            for full in _paths(base, rest):
                target = next(
                    ("::".join(full[:k]) for k in range(len(full), 0, -1) if "::".join(full[:k]) in mods), ""
                )
                if target and target != module:
                    edges[module].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_engine_modules_form_no_cycle() -> None:
    edges = _edges(_modules())
    assert len(edges) > 30, "the crate's modules were found"
    assert _cycles(edges) == []


def test_model_is_a_leaf_and_plugins_do_not_reach_the_batch_loop() -> None:
    edges = _edges(_modules())
    outside_model = {
        m: sorted(t for t in targets if t != "model" and not t.startswith("model::"))
        for m, targets in edges.items()
        if m == "model" or m.startswith("model::")
    }
    assert {m: t for m, t in outside_model.items() if t} == {}
    plugins_to_schedule = {
        m: sorted(t for t in targets if t.startswith("schedule"))
        for m, targets in edges.items()
        if m.startswith("plugins")
    }
    assert {m: t for m, t in plugins_to_schedule.items() if t} == {}
    assert any(t.startswith("model") for t in edges["plugins::node_affinity"]), (
        "a plugin's use of the model is seen"
    )


def test_a_cycle_would_be_reported() -> None:
    # The crate before the registry: model imported pod_table and default_preemption, which imported model.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_and_the_wire_decoders_do_not_use_pyo3() -> None:
    workspace = (RUST.parent / "Cargo.toml").read_text()
    for crate in ("core", "wire"):
        assert f'"rust/{crate}"' in workspace, f"rust/{crate} is a workspace member, so cargo test covers it"
        manifest = (RUST / crate / "Cargo.toml").read_text()
        assert "pyo3" not in manifest
        assert "numpy" not in manifest
        using = [
            p.name for p in (RUST / crate / "src").rglob("*.rs") if re.search(r"\bpyo3::", p.read_text())
        ]
        assert using == [], f"rust/{crate} uses pyo3"
