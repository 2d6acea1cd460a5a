"""docs/design.md names only repository paths that exist.

The page names paths three ways, and each is resolved by a fixed rule:

- **In backticks** in the prose (`` `loop/scheduling/cycle.py` ``, `` `schedule/load.rs` ``,
  `` `deploy/` ``, `` `tests/integration` ``). A span is a path when it is one word with no
  markup (:data:`WORD`) and either ends in a file extension (:data:`EXTENSIONS`) or has a
  ``/`` after a first segment the page uses as a folder (:data:`PREFIXES`); an API group
  (``coordination.k8s.io/v1``), a subresource (``pods/binding``) or a URL path
  (``/readyz``) is not. The page shortens paths by leaving out a leading folder, so a
  path exists when it exists under one of :data:`ROOTS`: ``loop/x.py`` is
  ``python/ksched/loop/x.py``, ``schedule/load.rs`` is ``rust/core/src/schedule/load.rs``.
  A bare file name (``registry.rs``, ``nominated.rs``) exists when some file under
  :data:`SOURCE_DIRS` has that name; upstream's files, which the page names to compare,
  are listed in :data:`UPSTREAM`.
- **In the Layout section's code blocks.** A line indented by at most
  :data:`MAX_ENTRY_INDENT` spaces starts an entry: its first word is a path, relative to
  the entry above it with less indentation, or to the repository root. The words of its
  description (the rest of the line and the deeper-indented lines below it) that end in a
  file extension or in ``/`` name something inside the entry: ``<entry>/<word>``,
  ``<entry>/src/<word>`` (a Rust crate), or, for a bare name, a file of that name anywhere
  under the entry.
- **As relative links** (``[adding-a-plugin.md](adding-a-plugin.md)``): relative to docs/.

A word ending in ``/`` must be a folder. The check reads the working tree only; it
never runs git.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"

# Where a path written without its leading folders is looked up, in order.
ROOTS = ("", "python/", "python/ksched/", "rust/core/src/", "rust/python/src/", "rust/wire/src/")
# The first segments that make a backticked span with a ``/`` a path even without an extension.
PREFIXES = frozenset(
    {
        "python",
        "rust",
        "deploy",
        "tests",
        "bench",
        "docs",
        "examples",
        "ksched",
        "commands",
        "loop",
        "cluster",
        "engine",
        "config",
        "model",
        "plugins",
        "schedule",
        "scheduling",
        "rebalancing",
        "mirror",
        "metrics",
        "realnode",
        "watch",
    }
)
EXTENSIONS = (".py", ".pyi", ".rs", ".toml", ".md", ".sh", ".yaml", ".yml", ".json", ".go", ".lock")
# Folders whose files a bare file name may name.
SOURCE_DIRS = ("python", "rust", "tests", "deploy", "docs", "bench", "examples")
# Build output and caches, never part of the repository.
SKIPPED_DIRS = frozenset({"target", "__pycache__", "node_modules"})
# Upstream's files (kubernetes/kubernetes) the page names when it compares.
UPSTREAM = frozenset({"schedule_one.go", "default_plugins.go", "registry.go", "types.go", "scoring.go"})
MAX_ENTRY_INDENT = 4

# One path-like word: letters, digits and ``_.-`` in segments joined by ``/``, maybe ending in ``/``.
WORD = re.compile(r"[A-Za-z_][\w.-]*(?:/[\w.-]+)*/?")
# A path-like word inside running text (not the tail of a longer path, a home or a URL).
IN_TEXT = re.compile(r"(?<![\w./~<>:-])" + WORD.pattern)
# A code span may wrap onto the next line, as Markdown allows; a span with a space is no path.
BACKTICKED = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = "```"


def _has_extension(word: str) -> bool:
    return word.endswith(EXTENSIONS)


@cache
def _names_under(folder: Path) -> frozenset[str]:
    """The file names under ``folder``, build output and hidden folders left out."""
    names: set[str] = set()
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        if any(p in SKIPPED_DIRS or p.startswith(".") for p in parts[:-1]):
            continue
        if path.is_file():
            names.add(path.name)
    return frozenset(names)


def _exists(path: Path, word: str) -> bool:
    """``path`` exists, and is a folder where ``word`` ends in ``/``."""
    return path.is_dir() if word.endswith("/") else path.exists()


def _prose_path_exists(word: str, repo: Path) -> bool:
    """A backticked path or link target: under one of :data:`ROOTS`, or a bare file name."""
    if any(_exists(repo / root / word, word) for root in ROOTS):
        return True
    if "/" not in word:
        return word in UPSTREAM or any(word in _names_under(repo / d) for d in SOURCE_DIRS)
    return False


def _split(text: str) -> tuple[list[str], list[list[str]]]:
    """The page's prose lines (fenced blocks blanked) and the Layout section's fenced blocks."""
    prose: list[str] = []
    layout: list[list[str]] = []
    section = ""
    block: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(FENCE):
            if block is None:
                block = []
            else:
                if section == "Layout":
                    layout.append(block)
                block = None
            prose.append("")
            continue
        if block is not None:
            block.append(line)
            prose.append("")
            continue
        if line.startswith("## "):
            section = line[3:].strip()
        prose.append(line)
    return prose, layout


def _prose_paths(prose: list[str]) -> Iterator[str]:
    """The backticked paths and relative link targets of the prose."""
    text = "\n".join(prose)
    for span in BACKTICKED.findall(text):
        word = span.strip()
        if not WORD.fullmatch(word):
            continue
        first = word.split("/", 1)[0]
        if _has_extension(word) or ("/" in word and first in PREFIXES):
            yield word
    for target in LINK.findall(text):
        if "://" in target or target.startswith("#"):
            continue
        yield "docs/" + target.split("#", 1)[0]


def _layout_paths(block: list[str]) -> Iterator[tuple[str, str]]:
    """Each Layout entry's path, and each word of its description, as (entry, word); the
    entry's own line yields (parent, entry)."""
    stack: list[tuple[int, str]] = []  # (indent, path) of the open entries
    entry = ""
    for line in block:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        rest = line
        if indent <= MAX_ENTRY_INDENT:
            name, _, rest = line.strip().partition(" ")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            entry = parent + name
            yield parent, name
            stack.append((indent, entry if entry.endswith("/") else parent))
            base = entry if entry.endswith("/") else parent
        else:
            base = stack[-1][1] if stack else ""
        for found in IN_TEXT.findall(rest):
            word = found.rstrip(".,;:")
            if _has_extension(word) or word.endswith("/"):
                yield base, word


def _layout_path_exists(base: str, word: str, repo: Path) -> bool:
    """``word`` inside the entry ``base``: directly, in a crate's src/, or as a bare name anywhere below."""
    folder = repo / base
    if _exists(folder / word, word) or _exists(folder / "src" / word, word):
        return True
    return "/" not in word and folder.is_dir() and word in _names_under(folder)


def missing_paths(text: str, repo: Path = REPO) -> list[str]:
    """The paths ``text`` (a design page) names that do not exist under ``repo``, in page order."""
    prose, layout = _split(text)
    missing = [w for w in _prose_paths(prose) if not _prose_path_exists(w, repo)]
    for block in layout:
        for base, word in _layout_paths(block):
            if not _layout_path_exists(base, word, repo):
                missing.append(f"{base}{word} (Layout)")
    return list(dict.fromkeys(missing))


def test_every_path_design_md_names_exists() -> None:
    missing = missing_paths(DESIGN.read_text(encoding="utf-8"))
    assert missing == [], "docs/design.md names paths that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("name", "page", "want"),
    [
        ("a full path", "`python/ksched/loop/scheduling/cycle.py`", []),
        ("a short form under python/ksched", "`loop/mirror/state.py` and `engine/load.py`", []),
        ("a short form under rust/core/src", "`schedule/load.rs`", []),
        ("a folder", "`deploy/` and `tests/integration`", []),
        ("a bare file name", "`nominated.rs`", []),
        ("upstream's file", "as `schedule_one.go` does", []),
        ("not a path", "`coordination.k8s.io/v1`, `pods/binding`, `/readyz`, `0/5 nodes`", []),
        ("a link", "[the checklist](adding-a-plugin.md)", []),
        ("a moved module", "`loop/cycle.py`", ["loop/cycle.py"]),
        ("a module now a package", "`cluster/realnode.py`", ["cluster/realnode.py"]),
        ("a file named as a folder", "`engine/load.py/`", ["engine/load.py/"]),
        ("a missing link", "[gone](gone.md)", ["docs/gone.md"]),
        (
            "a Layout block",
            "## Layout\n```\npython/ksched/\n  loop/  run.py, cycle.py, mirror/\n    metrics/  gone.py\n```\n",
            ["python/ksched/loop/metrics/gone.py (Layout)"],
        ),
        (
            "a Layout block's crate",
            "## Layout\n```\nrust/core/  model/ and registry.rs\nksched/  py.typed\n```\n",
            ["ksched/ (Layout)"],
        ),
    ],
)
def test_missing_paths(name: str, page: str, want: list[str]) -> None:
    assert missing_paths(page) == want, name
