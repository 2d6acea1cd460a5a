"""Bad input files end in one ``error:`` line and exit 2, never a traceback, a hang or a
memory blow-up: cluster files, ``--config``, ``--metrics`` and shadow logs (issue 48).

Each case is a file as a user could write it and the words the one-line error must say.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.commands.cli import main
from ksched.config.documents import ALIAS_NODES, load_documents
from ksched.errors import KschedError
from tests.conftest import node, pod

Obj = dict[str, Any]
CONFIG = "apiVersion: ksched.io/v1alpha1\nkind: KschedConfiguration\n"
METRIC_CONFIG = CONFIG + "metrics:\n- {name: cpu, source: prometheus, query: q}\n"
# The most a command may hold in memory for a bad file of up to 1 MiB (issue 48).
MAX_RSS_KIB = 512 * 1024


def alias_bomb(kind_list: bool = True) -> str:
    """Nine levels of ten aliases each: 10^9 pods from a few hundred bytes."""
    lines = ["x: &a [" + ", ".join(["{kind: Pod, metadata: {name: p}}"] * 10) + "]"]
    for prev, level in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{level}: &{level} [" + ", ".join([f"*{prev}"] * 10) + "]")
    if kind_list:
        lines += ["kind: List", "items: *i"]
    return "\n".join(lines) + "\n"


def merge_bomb() -> str:
    """Merge keys that copy a mapping ten times per level: the pairs grow tenfold each."""
    lines = ["a: &a {" + ", ".join(f"k{i}: {i}" for i in range(10)) + "}"]
    for prev, level in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{level}: &{level} {{<<: [" + ", ".join([f"*{prev}"] * 10) + "]}")
    return "\n".join(lines) + "\n"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2, f"want exit 2, got {code}: {err}"
    assert err.startswith("error: ") and err.count("\n") == 1, f"want one error line, got {err!r}"
    for w in words:
        assert w in err, f"want {w!r} in {err!r}"


def cluster(tmp_path: Path, objs: list[Any], name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    return str(path)


def text_file(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


# Documents: (name, text, words of the error).
DOCUMENTS = [
    ("alias bomb", alias_bomb(), f"more than {ALIAS_NODES} nodes"),
    ("merge-key bomb", merge_bomb(), f"more than {ALIAS_NODES} nodes"),
    ("recursive alias", "a: &a [1, *a]\n", "refers to a node that contains it"),
    ("duplicate YAML key", "n1: {cpu: 1}\nn1: {cpu: 2}\n", "duplicate key 'n1' (line 2)"),
    ("duplicate JSON key", '{"a": 1, "a": 2}', "duplicate key 'a'"),
    ("JSON nested 100k deep", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("YAML nested 100k deep", "a: " + "[" * 100_000 + "]" * 100_000, "nesting depth"),
]


@pytest.mark.parametrize(("text", "words"), [c[1:] for c in DOCUMENTS], ids=[c[0] for c in DOCUMENTS])
def test_a_document_that_would_expand_or_recurse_is_refused_in_one_line(text: str, words: str) -> None:
    with pytest.raises(KschedError) as err:
        load_documents(text, "f.yaml", KschedError)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_anchors_used_as_templates_and_merge_overrides_still_load() -> None:
    text = "base: &base {cpu: 1, memory: 2}\nn1: {<<: *base, cpu: 3}\nn2: *base\n"
    assert load_documents(text, "f.yaml", KschedError) == [
        {"base": {"cpu": 1, "memory": 2}, "n1": {"cpu": 3, "memory": 2}, "n2": {"cpu": 1, "memory": 2}}
    ]


def _peak(argv: list[str]) -> tuple[int, str, int]:
    """Run ``ksched ARGV`` in a child process: its exit code, stderr and peak RSS in KiB.

    The peak is the child's own (VmHWM): ``getrusage``'s ru_maxrss keeps, across exec, the peak
    of the process that forked it, here pytest's, however large it grew."""
    script = (
        "import sys\n"
        "from ksched.commands.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print('maxrss', hwm, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120, check=False
    )
    lines = done.stderr.splitlines()
    assert lines and lines[-1].startswith("maxrss "), done.stderr
    return done.returncode, "\n".join(lines[:-1]), int(lines[-1].split()[1])


@pytest.mark.parametrize("source", ["alias bomb", "/dev/zero"])
def test_a_bomb_or_an_endless_file_is_refused_quickly_in_bounded_memory(tmp_path: Path, source: str) -> None:
    path = text_file(tmp_path, "bomb.yaml", alias_bomb()) if source == "alias bomb" else source
    code, err, rss = _peak(["simulate", path])
    assert code == 2 and err.startswith("error: "), err
    assert rss < MAX_RSS_KIB, f"peak RSS {rss} KiB"


def _shadow_report(tmp_path: Path, content: bytes) -> list[str]:
    return ["shadow", "report", "--file", text_file(tmp_path, "shadow.log", content)]


def _simulate_with(option: str) -> Callable[[Path, bytes], list[str]]:
    def argv(tmp_path: Path, content: bytes) -> list[str]:
        config = CONFIG if option == "--config" else METRIC_CONFIG
        base = [
            "simulate",
            cluster(tmp_path, [node("n1")]),
            "--config",
            text_file(tmp_path, "c.yaml", config),
        ]
        return [*base, option, text_file(tmp_path, "f.yaml", content)]

    return argv


# Each file a command reads, given bytes that are not UTF-8.
NOT_UTF8: list[tuple[str, Callable[[Path, bytes], list[str]]]] = [
    ("cluster file", lambda t, c: ["simulate", text_file(t, "cluster.yaml", c)]),
    ("--config", _simulate_with("--config")),
    ("--metrics", _simulate_with("--metrics")),
    ("shadow report --file", _shadow_report),
]


@pytest.mark.parametrize("argv", [c[1] for c in NOT_UTF8], ids=[c[0] for c in NOT_UTF8])
def test_bytes_that_are_not_utf8_are_named_by_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: Callable[[Path, bytes], list[str]]
) -> None:
    code, _, err = run_cli(argv(tmp_path, b"n1: {cpu: 1} # caf\xe9\n"), capsys)
    assert_one_line_error(code, err, "not UTF-8 text (byte 0xe9 at offset 18)")


def test_a_directory_given_as_the_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["simulate", str(tmp_path)], capsys)
    assert_one_line_error(code, err, f"cannot read cluster file {tmp_path}", "Is a directory")


def test_a_cluster_file_nested_too_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = text_file(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(["simulate", path], capsys)
    assert_one_line_error(code, err, "not valid JSON: nested too deeply")


def _with(obj: Obj, path: str, value: Any) -> Obj:
    """``obj`` with the field at dotted ``path`` set to ``value``."""
    out = json.loads(json.dumps(obj))
    *parents, last = path.split(".")
    target = out
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value
    return out


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "default"},
    "spec": {"resources": {"requests": {"storage": "1Gi"}}},
}
# (name, the bad object, words of the error: the object and the field).
MALFORMED = [
    ("node labels as a list", _with(node("n2"), "metadata.labels", ["a"]), "node n2: metadata.labels: must be a mapping"),
    ("node taint as a string", _with(node("n2"), "spec.taints", ["x"]), "node n2: spec.taints: [0]: must be a mapping"),
    ("node status as a string", _with(node("n2"), "status", "Ready"), "node n2: status: must be a mapping"),
    ("node label value a list", _with(node("n2"), "metadata.labels", {"a": [1]}), "node n2: metadata.labels: 'a'"),
    ("node unschedulable a string", _with(node("n2"), "spec.unschedulable", "yes"), "node n2: spec.unschedulable: must be a boolean, found str"),
    ("node name null", _with(node("n2"), "metadata.name", None), "node (object 2): metadata.name: must be a non-empty string"),
    ("node name empty", _with(node("n2"), "metadata.name", ""), "node (object 2): metadata.name: must be a non-empty string"),
    ("namespace labels as a list", _with(NAMESPACE, "metadata.labels", ["a"]), "namespace team: metadata.labels: must be a mapping"),
    ("claim status as a string", _with(CLAIM, "status", "Bound"), "PersistentVolumeClaim data: status: must be a mapping"),
    ("claim spec as a string", _with(CLAIM, "spec", "x"), "PersistentVolumeClaim data: spec: must be a mapping"),
    ("claim access modes a string", _with(CLAIM, "spec.accessModes", "RWO"), "PersistentVolumeClaim data: spec.accessModes: must be a list of strings"),
]  # fmt: skip


@pytest.mark.parametrize(("bad", "words"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_object_refuses_the_file_naming_the_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: Obj, words: str
) -> None:
    path = cluster(tmp_path, [node("n1"), bad, pod("web")])
    code, _, err = run_cli(["simulate", path], capsys)
    assert_one_line_error(code, err, f"{path}: {words}")


# (name, the cluster's objects or raw text, words of the error).
REFUSED_FILES: list[tuple[str, list[Obj] | str, str]] = [
    ("empty file", "", "no objects"),
    ("only comments", "# nothing here\n", "no objects"),
    ("empty List", [], "no objects"),
    ("mappings without a kind", "x: 1\n", "no objects"),
    ("the same pod twice", [node("n1"), pod("web"), pod("web")], "pod default/web appears twice"),
    ("the same node twice", [node("n1"), node("n1")], "node n1 appears twice"),
]


@pytest.mark.parametrize(
    ("content", "words"), [c[1:] for c in REFUSED_FILES], ids=[c[0] for c in REFUSED_FILES]
)
def test_a_file_without_objects_or_with_one_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: list[Obj] | str, words: str
) -> None:
    path = text_file(tmp_path, "c.yaml", content) if isinstance(content, str) else cluster(tmp_path, content)
    code, _, err = run_cli(["simulate", path], capsys)
    assert_one_line_error(code, err, words)


def test_a_pod_of_the_same_name_in_another_namespace_is_another_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = cluster(tmp_path, [node("n1"), pod("web"), pod("web", namespace="team")])
    code, out, _ = run_cli(["simulate", path], capsys)
    assert code == 0
    assert "2/2 pending pods placed" in out


# (name, the --metrics file, words of the error: the key).
METRIC_FILES = [
    ("unknown node", "nX: {cpu: 0.5}\n", "'nX': not a node of the cluster (n1)"),
    ("misspelled metric", "n1: {cpuu: 0.5}\n", "'n1.cpuu': 'cpuu' is not a metric (cpu)"),
    ("non-numeric string", "n1: {cpu: fast}\n", "'n1.cpu': 'fast' is not a finite number"),
    ("infinite value", "n1: {cpu: .inf}\n", "'n1.cpu': inf is not a finite number"),
    ("boolean value", "n1: {cpu: true}\n", "'n1.cpu': True is not a finite number"),
    ("duplicate node", "n1: {cpu: 0.5}\nn1: {cpu: 0.9}\n", "duplicate key 'n1' (line 2)"),
    ("duplicate metric", "n1: {cpu: 0.5, cpu: 0.9}\n", "duplicate key 'cpu'"),
    ("node without a mapping", "n1: 0.5\n", "'n1': expected a mapping of metric name to number"),
]


@pytest.mark.parametrize(
    ("content", "words"), [c[1:] for c in METRIC_FILES], ids=[c[0] for c in METRIC_FILES]
)
def test_a_metrics_file_value_that_would_be_dropped_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, words: str
) -> None:
    argv = _simulate_with("--metrics")(tmp_path, content.encode())
    code, _, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, words)


def test_a_metrics_file_with_known_keys_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A numeric string counts as its number, as before; the values reach the scores."""
    config = text_file(tmp_path, "c.yaml", METRIC_CONFIG)
    path = cluster(tmp_path, [node("n1"), node("n2"), pod("web")])
    metrics = text_file(tmp_path, "m.yaml", "n1: {cpu: '0.9'}\nn2: {cpu: 0.1}\n")
    code, out, _ = run_cli(["simulate", path, "--config", config, "--metrics", metrics, "-o", "json"], capsys)
    assert code == 0
    assert json.loads(out)["placements"][0]["node"] == "n2", "prefer lower: the node with 0.1"


def test_names_with_newlines_and_escapes_are_escaped_in_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = cluster(tmp_path, [node("n1\nfake 100.0"), pod("w\x1b[2Jeb")])
    code, out, _ = run_cli(["simulate", path], capsys)
    assert code == 0
    assert "default/w\\x1b[2Jeb  n1\\nfake 100.0" in out
    assert "\x1b" not in out and "\nfake" not in out
    code, out, _ = run_cli(["simulate", path, "-o", "json"], capsys)
    assert json.loads(out)["placements"][0]["node"] == "n1\nfake 100.0", "JSON keeps the name as it is"


def test_an_error_quoting_a_name_stays_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = cluster(tmp_path, [_with(node("n\n1"), "metadata.labels", ["a"])])
    code, _, err = run_cli(["simulate", path], capsys)
    assert_one_line_error(code, err, "node n\\n1: metadata.labels")
