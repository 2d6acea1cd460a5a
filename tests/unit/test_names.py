"""Kubernetes' grammar for keys, names and label values, as the API server checks it, and
every configuration key that takes one reading it the same way.

The cases follow upstream apimachinery's validation (IsQualifiedName, IsValidLabelValue,
IsDNS1123Subdomain, IsDNS1123Label). Each reader once had its own pattern, and they differed:
steering's taint key took ``a..b/hot``, a profile's resource name took a prefix past 253
characters, and every ``$``-anchored pattern took a trailing newline.
"""

from __future__ import annotations

from typing import Any

import pytest

from ksched.config import parse_config
from ksched.config.names import is_dns_label, is_dns_subdomain, is_label_value, is_qualified_name
from ksched.errors import ConfigError

LONG_PREFIX = ".".join(["a" * 63] * 4)  # 255 characters: one past a subdomain's 253
QUALIFIED = [
    # text, whether it is a qualified name (a label key, taint key or resource name)
    ("cpu", True),
    ("app.kubernetes.io/name", True),
    ("example.com/Heat_1.x-y", True),
    ("1-2", True),
    ("a" * 63, True),
    ("a" * 64, False),
    ("p/" + "a" * 63, True),
    (LONG_PREFIX[:253] + "/x", True),
    (LONG_PREFIX + "/x", False),
    ("a..b/hot", False),
    ("-a.io/hot", False),
    ("A.io/hot", False),
    ("a.io-/hot", False),
    ("/x", False),
    ("x/", False),
    ("a/b/c", False),
    ("", False),
    ("-x", False),
    ("x_", False),
    ("not a label", False),
    ("app\n", False),
    ("ksched.io/hot\n", False),
]
LABEL_VALUES = [
    ("", True),
    ("a", True),
    ("v1.2_x-Y", True),
    ("a" * 63, True),
    ("a" * 64, False),
    ("-a", False),
    ("a.", False),
    ("a b", False),
    ("a/b", False),
    ("a\n", False),
]
DNS = [
    # text, DNS-1123 label, DNS-1123 subdomain
    ("team-a", True, True),
    ("tls.ksched", False, True),
    ("a" * 63, True, True),
    ("a" * 64, False, True),
    (LONG_PREFIX[:253], False, True),
    (LONG_PREFIX[:254], False, False),
    ("Team_A", False, False),
    ("a..b", False, False),
    ("-a", False, False),
    ("a-", False, False),
    ("", False, False),
    ("team-a\n", False, False),
]


@pytest.mark.parametrize(("text", "valid"), QUALIFIED, ids=[repr(t[:20]) for t, _ in QUALIFIED])
def test_a_qualified_name_is_a_name_after_an_optional_subdomain_prefix(text: str, valid: bool) -> None:
    assert is_qualified_name(text) is valid


@pytest.mark.parametrize(("text", "valid"), LABEL_VALUES, ids=[repr(t[:20]) for t, _ in LABEL_VALUES])
def test_a_label_value_is_empty_or_a_name(text: str, valid: bool) -> None:
    assert is_label_value(text) is valid


@pytest.mark.parametrize(("text", "label", "subdomain"), DNS, ids=[repr(t[:20]) for t, _, _ in DNS])
def test_dns_labels_and_subdomains(text: str, label: bool, subdomain: bool) -> None:
    assert (is_dns_label(text), is_dns_subdomain(text)) == (label, subdomain)


BASE: dict[str, Any] = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    "prometheus": {"url": "http://prometheus:9090"},
}
HEAT = {"name": "heat", "source": "annotation", "annotation": "example.com/heat", "filter": {"above": 0.8}}


def _steering_taint_key(key: str) -> Any:
    return parse_config({**BASE, "metrics": [HEAT], "steering": {"taintKey": key}}).steering.taint_key


def _steering_node_selector(key: str) -> Any:
    return parse_config({**BASE, "metrics": [HEAT], "steering": {"nodeSelector": {key: "a"}}}).steering


def _workload_label(key: str) -> Any:
    estimate = {
        "resource": "cpu",
        "podQuery": "sum by (namespace, pod) (irate(pod_cpu_usage_seconds_total[1m]))",
        "learn": True,
        "scrapeInterval": "15s",
        "workloadLabel": key,
    }
    metric = {"name": "cpu", "source": "prometheus", "query": "q[90s]", "estimate": estimate}
    return parse_config({**BASE, "metrics": [metric]}).metrics[0].estimate


def _estimate_resource(key: str) -> Any:
    metric = {"name": "cpu", "source": "prometheus", "query": "q[90s]", "estimate": {"resource": key}}
    return parse_config({**BASE, "metrics": [metric]}).metrics[0].estimate


def _fit_ignored_resource(key: str) -> Any:
    args = {"ignoredResources": [key]}
    profile = {"schedulerName": "ksched", "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}
    return parse_config({**BASE, "profiles": [profile]}).profiles


# Each reader, and the start of its error for a bad text: the key's path.
READERS = {
    "steering.taintKey": (_steering_taint_key, "steering.taintKey: "),
    "steering.nodeSelector": (_steering_node_selector, "steering.nodeSelector: "),
    "estimate.workloadLabel": (_workload_label, "metrics[0].estimate.workloadLabel: "),
    "estimate.resource": (_estimate_resource, "metrics[0].estimate.resource: "),
    "NodeResourcesFit ignoredResources": (
        _fit_ignored_resource,
        "profiles[0].pluginConfig[0].args.ignoredResources[0]: ",
    ),
}


@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
@pytest.mark.parametrize(("text", "valid"), QUALIFIED, ids=[repr(t[:20]) for t, _ in QUALIFIED])
def test_every_key_that_takes_a_qualified_name_reads_it_as_the_api_server_does(
    reader: str, text: str, valid: bool
) -> None:
    read, path = READERS[reader]
    if valid:
        read(text)
    else:
        with pytest.raises(ConfigError) as err:
            read(text)
        message = str(err.value)
        assert message.startswith(path), message
        assert "is not a" in message or (text == "" and "non-empty" in message), message
