"""Configurations that used to pass validation and then misbehave at run time (a tight
loop, a filter that rejects every node, an infinite wait, a traceback at start-up) are
refused when loaded, with the key path (issue 48). ``ksched simulate --config`` and
``ksched run`` load through the same validation, so both refuse them alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.commands.cli import main
from ksched.config import parse_config
from ksched.errors import ConfigError
from tests.conftest import node, pod

Obj = dict[str, Any]
HEAD = {"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration"}
INF = float("inf")


def metric(**extra: Any) -> Obj:
    return {"name": "cpu", "source": "prometheus", "query": "q", **extra}


def rebalancing(**extra: Any) -> Obj:
    """An enabled rebalancer over one metric with a hot line and an estimate."""
    return {
        "metrics": [metric(filter={"above": 0.8}, estimate={"resource": "cpu"})],
        "rebalance": {"enabled": True, **extra},
    }


# (name, the sections, words of the error: the key path and what is wrong).
REFUSED = [
    ("refresh.min 0: a tight loop", {"metrics": [metric(refresh={"min": 0})]}, "metrics[0].refresh.min: 0 is under the minimum of 0.5s"),
    ("prometheus.timeout 0", {"prometheus": {"url": "http://p:9090", "timeout": 0}}, "prometheus.timeout: must be longer than 0"),
    ("maxAge 0: every sample stale", {"metrics": [metric(maxAge=0)]}, "metrics[0].maxAge: must be longer than 0"),
    ("maxAge .inf", {"metrics": [metric(maxAge=INF)]}, "metrics[0].maxAge: inf is not a duration"),
    ("filter rejecting every node", {"metrics": [metric(filter={"above": 0.2, "below": 0.8})]}, "metrics[0].filter: below (0.8) is over above (0.2)"),
    ("band rejecting every node", {"metrics": [metric(filter={"bands": [{"minPriority": 1, "above": 0.1, "below": 0.5}]})]}, "metrics[0].filter.bands[0]: below (0.5) is over above (0.1)"),
    ("rebalance.interval 1ms", rebalancing(interval="1ms"), "rebalance.interval: '1ms' is under the minimum of 1s"),
    ("evictionsPerMinute 0 while enabled", rebalancing(evictionsPerMinute=0), "rebalance.evictionsPerMinute: must be above 0"),
    ("negative herdEstimate.factor", {"metrics": [metric(herdEstimate={"resource": "cpu", "factor": -1})]}, "metrics[0].herdEstimate.factor: must not be negative"),
    ("decisionDeadline 0", {"batch": {"decisionDeadline": 0}}, "batch.decisionDeadline: must be longer than 0"),
    ("batch.maxWait .inf", {"batch": {"maxWait": INF}}, "batch.maxWait: inf is not a duration"),
    ("a duration past a year", {"handoff": {"after": "9000h"}}, "handoff.after: '9000h' is longer than the limit"),
    ("an integer past any float", {"clientConnection": {"qps": 10**400}}, "clientConnection.qps: "),
    ("a Prometheus URL that is not one", {"prometheus": {"url": "not a url"}}, "prometheus.url: 'not a url' is not an http(s) URL"),
    ("a Prometheus URL without http", {"prometheus": {"url": "prometheus:9090"}}, "prometheus.url: 'prometheus:9090' is not an http(s) URL"),
    ("prefer target(1e999)", {"metrics": [metric(prefer="target(1e999)")]}, "metrics[0].prefer: 'target(1e999)': the target must be a finite number"),
    ("leaseDuration .inf", {"leaderElection": {"leaseDuration": INF}}, "leaderElection.leaseDuration: inf is not a duration"),
    ("webhook.address nonsense", {"webhook": {"address": "nonsense"}}, "webhook.address: 'nonsense' is not HOST:PORT"),
    ("webhook.address port 0", {"webhook": {"address": "0.0.0.0:0"}}, "webhook.address: '0.0.0.0:0' is not HOST:PORT"),
    ("webhook.certFile missing", {"webhook": {"enabled": True, "certFile": "/nonexistent/tls.crt", "keyFile": "/nonexistent/tls.key"}}, "webhook.certFile: cannot read /nonexistent/tls.crt: No such file or directory"),
]  # fmt: skip


@pytest.mark.parametrize(("sections", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_value_that_would_misbehave_at_run_time_is_refused_with_its_key_path(
    sections: Obj, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**HEAD, **sections})
    assert words in str(err.value)


# (name, the sections): the edges of what is allowed.
ACCEPTED = [
    ("refresh.min at its minimum", {"metrics": [metric(refresh={"min": "500ms", "max": "1s"})]}),
    ("a filter band of one value", {"metrics": [metric(filter={"above": 0.5, "below": 0.5})]}),
    ("a filter with both sides", {"metrics": [metric(filter={"above": 0.8, "below": 0.2})]}),
    ("evictionsPerMinute 0 while disabled", {"rebalance": {"evictionsPerMinute": 0}}),
    ("rebalance.interval 1s", rebalancing(interval="1s")),
    ("maxWait 0: no waiting", {"batch": {"maxWait": 0}}),
    ("an https URL with a path", {"prometheus": {"url": "https://p.example/prom/"}}),
    ("an IPv6 listen address", {"webhook": {"address": "[::]:9443"}}),
    ("certFile missing while the webhook is off", {"webhook": {"certFile": "/nonexistent/c", "keyFile": "/nonexistent/k"}}),
]  # fmt: skip


@pytest.mark.parametrize("sections", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_values_at_the_edges_are_accepted(sections: Obj) -> None:
    parse_config({**HEAD, **sections})


def config_file(tmp_path: Path, sections: Obj) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**HEAD, **sections}))
    return str(path)


# (name, the sections, words of the error), for both commands.
AT_START = [
    ("missing certFile", {"webhook": {"enabled": True, "certFile": "/nonexistent/c", "keyFile": "/nonexistent/k"}}, "webhook.certFile: cannot read /nonexistent/c"),
    ("webhook.address nonsense", {"webhook": {"address": "nonsense"}}, "webhook.address: 'nonsense' is not HOST:PORT"),
    ("leaseDuration .inf", {"leaderElection": {"leaseDuration": INF}}, "leaderElection.leaseDuration: inf is not a duration"),
]  # fmt: skip


@pytest.mark.parametrize(("sections", "words"), [c[1:] for c in AT_START], ids=[c[0] for c in AT_START])
def test_simulate_config_and_run_refuse_alike(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sections: Obj,
    words: str,
) -> None:
    def started(*args: object) -> int:
        raise AssertionError("ksched run started with a configuration it should have refused")

    monkeypatch.setattr("ksched.loop.run.run", started)
    config = config_file(tmp_path, sections)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump([node("n1"), pod("web")]))
    for argv in (["simulate", str(cluster), "--config", config], ["run", "--config", config]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert words in err, (argv, err)


def test_run_refuses_a_health_address_that_is_not_host_port(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def started(*args: object) -> int:
        raise AssertionError("ksched run started with a bad --address")

    monkeypatch.setattr("ksched.loop.run.run", started)
    assert main(["run", "--address", "nonsense"]) == 2
    assert "error: --address: 'nonsense' is not HOST:PORT" in capsys.readouterr().err
