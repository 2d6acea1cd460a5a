"""The load simulation's usage profile: its shape over time and the annotations that carry it."""

from __future__ import annotations

import pytest

from ksched.cluster import load
from ksched.cluster.load import LoadSimulation, LoadSimulationError, UsageProfile

SHAPES = [
    # (name, profile, seconds since start, expected multiple of the request)
    ("no profile fields: the request", UsageProfile(), 500.0, 1.0),
    ("flat base", UsageProfile(base=0.7), 0.0, 0.7),
    ("ramp halfway", UsageProfile(base=0.8, ramp_s=60), 30.0, 0.4),
    ("ramp done", UsageProfile(base=0.8, ramp_s=60), 90.0, 0.8),
    ("ramp starts at zero", UsageProfile(base=0.8, ramp_s=60), 0.0, 0.0),
    (
        "before the first burst",
        UsageProfile(base=0.5, burst_every_s=120, burst_for_s=20, burst_to=2.0),
        99.0,
        0.5,
    ),
    (
        "in the first burst",
        UsageProfile(base=0.5, burst_every_s=120, burst_for_s=20, burst_to=2.0),
        100.0,
        2.0,
    ),
    (
        "burst ends with its period",
        UsageProfile(base=0.5, burst_every_s=120, burst_for_s=20, burst_to=2.0),
        120.0,
        0.5,
    ),
    ("a later burst", UsageProfile(base=0.5, burst_every_s=120, burst_for_s=20, burst_to=2.0), 340.5, 2.0),
]


@pytest.mark.parametrize(("name", "profile", "seconds", "want"), SHAPES, ids=[s[0] for s in SHAPES])
def test_multiple_follows_ramp_and_bursts(
    name: str, profile: UsageProfile, seconds: float, want: float
) -> None:
    assert profile.multiple(seconds) == pytest.approx(want), name


def test_noise_is_seeded_bounded_and_held_per_bucket() -> None:
    profile = UsageProfile(base=1.0, noise=0.2, seed=17)
    series = [profile.multiple(float(t)) for t in range(0, 3000, load.NOISE_BUCKET_S)]
    assert series == [
        UsageProfile(base=1.0, noise=0.2, seed=17).multiple(float(t)) for t in range(0, 3000, 15)
    ]
    assert all(0.8 <= m < 1.2 for m in series)
    # Spread over the band, not stuck: both halves are visited and values rarely repeat.
    assert min(series) < 0.9 and max(series) > 1.1
    assert len(set(series)) > len(series) * 0.9
    # Constant within a bucket; another seed gives another series.
    assert profile.multiple(15.0) == profile.multiple(29.9)
    other = [UsageProfile(base=1.0, noise=0.2, seed=18).multiple(float(t)) for t in range(0, 3000, 15)]
    assert other != series


def test_annotations_carry_every_field() -> None:
    profile = UsageProfile(
        base=0.7,
        ramp_s=60,
        burst_every_s=120,
        burst_for_s=20,
        burst_to=2.0,
        noise=0.1,
        seed=17,
        reference_cpu="250m",
    )
    assert load.usage_annotations(profile) == {
        "load.ksched.io/base": "0.7",
        "load.ksched.io/ramp-seconds": "60.0",
        "load.ksched.io/burst-every-seconds": "120",
        "load.ksched.io/burst-for-seconds": "20",
        "load.ksched.io/burst-to": "2.0",
        "load.ksched.io/noise": "0.1",
        "load.ksched.io/seed": "17",
        "load.ksched.io/reference-cpu": "250m",
    }


def test_clock_timed_bursts_come_at_the_same_moments_whenever_the_pod_started() -> None:
    epoch = 1_800_000_000
    profile = UsageProfile(base=0.5, burst_every_s=180, burst_for_s=60, burst_to=1.0, burst_epoch_s=epoch)
    # Two pods started 100 s apart read the clock's seconds since the epoch, not their own age.
    assert profile.multiple(10.0, unix_s=epoch + 130.0) == 1.0
    assert profile.multiple(110.0, unix_s=epoch + 130.0) == 1.0
    assert profile.multiple(10.0, unix_s=epoch + 100.0) == 0.5
    assert profile.multiple(10.0, unix_s=epoch + 180.0 + 130.0) == 1.0
    # Timed by the pod's age, the same moment is a burst for one and not the other.
    by_age = UsageProfile(base=0.5, burst_every_s=180, burst_for_s=60, burst_to=1.0)
    assert by_age.multiple(130.0, unix_s=epoch + 130.0) == 1.0
    assert by_age.multiple(30.0, unix_s=epoch + 130.0) == 0.5
    assert load.usage_annotations(profile)[load.BURST_EPOCH] == str(epoch)
    with pytest.raises(LoadSimulationError, match="unix_s"):
        profile.multiple(10.0)
    assert load.BURST_EPOCH not in load.usage_annotations(by_age)


def test_kwoks_expression_reads_the_clock_only_where_the_pod_names_an_epoch() -> None:
    cpu = load.kwok_documents()[0]["spec"]["usages"][0]["usage"]["cpu"]["expression"]
    assert '("load.ksched.io/burst-epoch" in pod.metadata.annotations ? int(UnixSecond(Now())) - ' in cpu


@pytest.mark.parametrize(
    "fields",
    [
        {"base": -0.1},
        {"noise": 1.0},
        {"burst_every_s": 10, "burst_for_s": 11},
        {"seed": -1},
        {"seed": 2**31},
        {"burst_epoch_s": -1},
    ],
)
def test_invalid_profiles_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(LoadSimulationError):
        UsageProfile(**fields)  # type: ignore[arg-type]


def test_settings_are_checked() -> None:
    with pytest.raises(LoadSimulationError, match="at least 10 s"):
        LoadSimulation(metric_resolution_s=5)
    with pytest.raises(LoadSimulationError, match="scrape interval"):
        LoadSimulation(scrape_interval_s=0)
    assert LoadSimulation().rate_window_s == 60.0


def test_every_node_names_its_metrics_path_and_prometheus_keeps_only_those() -> None:
    config = load.prometheus_scrape_config("127.0.0.1:1234", LoadSimulation(scrape_interval_s=2))
    assert config["scrape_interval"] == config["scrape_timeout"] == "2000ms"
    assert config["http_sd_configs"] == [
        {"url": "http://127.0.0.1:1234/discovery/prometheus", "refresh_interval": "2000ms"}
    ]
    assert load.resource_metrics_path("kwok-node-00003") == "/metrics/nodes/kwok-node-00003/metrics/resource"
