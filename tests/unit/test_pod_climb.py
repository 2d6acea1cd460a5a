"""A ramping pod counts at what its climb says it will reach, not at its last sample.

A pod whose usage still rises (a Java or Python service warming up) reads below what it will
use; counted at its sample, its node looks cool, and the next pods pile onto it. Its climb
over its last samples (the slower of its last rises: a trend, not one step up), carried on for
the rest of its warm-up (its workload's, where learned; else as long again as it has ramped so
far), is what it counts at while that is more than its estimate.
"""

from __future__ import annotations

import pytest

from ksched.loop.metrics.pod_series import PodSeries
from tests.unit.test_learned_estimate import NODE_VALUE, learned_metric
from tests.unit.test_load_estimate import T0
from tests.unit.test_workload_estimate import Loop, judge, owned

CAP_S = 180.0


def climbing(
    series: PodSeries, values: list[float], bound_s: float = 0.0, warmup_s: float | None = None
) -> float:
    """Feeds ``values`` 15 s apart to the pod ``default/java``, bound ``bound_s`` before the
    first (its workload's warm-up ``warmup_s``); returns its age at the last."""
    age = bound_s
    for n, value in enumerate(values):
        age = bound_s + n * 15.0
        assert series.ramping("default/java", "u1", n * 15.0, value, age, warmup_s, CAP_S)[0]
    return age


def test_a_linear_climb_is_carried_on_for_as_long_again_as_it_has_ramped() -> None:
    series = PodSeries(scrape_interval_s=15.0)
    age = climbing(series, [50.0, 100.0, 200.0, 300.0])
    # 200m over 30 s, carried on for its 45 s of age: 300m more (at most its sample again).
    assert series.climb("default/java", "u1", age, None, CAP_S) == pytest.approx(300.0)


def test_a_learned_warm_up_says_how_long_the_climb_goes_on() -> None:
    series = PodSeries(scrape_interval_s=15.0)
    age = climbing(series, [50.0, 100.0, 200.0, 300.0])
    assert series.climb("default/java", "u1", age, 60.0, CAP_S) == pytest.approx(100.0), "15 s left"
    assert series.climb("default/java", "u1", age, 40.0, CAP_S) == 0.0, "past its workload's warm-up"
    assert series.climb("default/java", "u1", age, None, 50.0) == pytest.approx(33.3, abs=0.1), "the cap"


def test_a_climb_is_never_taken_as_more_than_a_doubling() -> None:
    series = PodSeries(scrape_interval_s=15.0)
    age = climbing(series, [5.0, 10.0, 50.0, 100.0], bound_s=15.0)
    # 40m and 50m a scrape: the slower, 40m over 15 s, for its 60 s of age is 160m; 100m at most.
    assert series.climb("default/java", "u1", age, None, CAP_S) == 100.0


def test_a_climb_is_its_slower_rise_and_a_step_up_is_none() -> None:
    levels = PodSeries(scrape_interval_s=15.0)
    age = climbing(levels, [100.0, 300.0, 400.0, 450.0])
    # It rose 100m, then 50m: levelling off, it is carried on at the slower rise.
    assert levels.climb("default/java", "u1", age, None, CAP_S) == pytest.approx(50.0 / 15.0 * 45.0)
    burst = PodSeries(scrape_interval_s=15.0)
    age = climbing(burst, [300.0, 400.0, 395.0, 800.0], warmup_s=120.0)
    assert burst.climb("default/java", "u1", age, 120.0, CAP_S) == 0.0, "a burst: one step up, no trend"
    noisy = PodSeries(scrape_interval_s=15.0)
    age = climbing(noisy, [300.0, 500.0, 612.0, 1098.0], warmup_s=120.0)
    # One sample read high: the step before it (112m) is what the trend still says.
    assert noisy.climb("default/java", "u1", age, 120.0, CAP_S) == pytest.approx(112.0 / 15.0 * 75.0)


def test_no_climb_from_noise_too_few_samples_or_a_fall() -> None:
    series = PodSeries(scrape_interval_s=15.0)
    age = climbing(series, [90.0, 100.0, 105.0, 109.0], warmup_s=120.0)
    assert series.climb("default/java", "u1", age, 120.0, CAP_S) == 0.0, "+9 % over two: noise"
    fell = PodSeries(scrape_interval_s=15.0)
    age = climbing(fell, [100.0, 300.0, 200.0, 250.0], warmup_s=120.0)
    assert fell.climb("default/java", "u1", age, 120.0, CAP_S) == 0.0, "below where it was"
    young = PodSeries(scrape_interval_s=15.0)
    age = climbing(young, [100.0, 200.0])
    assert young.climb("default/java", "u1", age, None, CAP_S) == 0.0, "one rise is no trend"
    assert young.climb("default/other", "u1", age, None, CAP_S) == 0.0, "a pod never read"
    assert young.climb("default/java", "u2", age, None, CAP_S) == 0.0, "another pod of that name"


def test_a_first_sample_that_read_low_does_not_speed_the_climb_up() -> None:
    series = PodSeries(scrape_interval_s=15.0)
    # Its first sample, an average since its container started, reads half of what it used then.
    age = climbing(series, [50.0, 200.0, 300.0])
    # Read from its third sample on, at its later rise (100m a scrape) for its 30 s of age: 200m,
    # where the 150m from the first would say 300m.
    assert series.climb("default/java", "u1", age, None, CAP_S) == pytest.approx(100.0 / 15.0 * 30.0)


def test_the_node_counts_a_climbing_pod_at_its_climb_and_a_settled_one_at_its_usage() -> None:
    loop = Loop(learned_metric(warmup_s=600.0))
    loop.add(owned("java", "n1", cpu="1"))
    values = [200.0, 400.0, 800.0, 1200.0]
    for value in values:
        matrix = loop.sample({"java": value})
    age = loop.clock.now - T0
    # 800m over its last two samples (4 s), carried on for its age (8 s): past a doubling, so 2400m.
    assert 800.0 / 4.0 * age > values[-1]
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 2.4 / 4), "counts 2.4 cores, not its 1.2 read"
    [shown] = loop.store.learned()["cpu"]["rampingPods"]
    assert (shown["counts"], shown["measured"]) == (2400.0, 1200.0)
    for value in (1250.0, 1230.0):
        matrix = loop.sample({"java": value})
    assert loop.store.learned()["cpu"]["ramping"] == [], "level over two samples: stable"
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 1.23 / 4), "settled: its measured 1230m"


def test_the_share_of_pods_that_still_rose_at_their_first_chance() -> None:
    series = PodSeries(scrape_interval_s=15.0)
    assert series.rising_share() is None, "none judged yet"

    def feed(key: str, values: list[float]) -> bool:
        """Whether it ramps after ``values``, 15 s apart."""
        return [
            series.ramping(key, "u1", n * 15.0, v, n * 15.0, None, CAP_S)[0] for n, v in enumerate(values)
        ][-1]

    feed("default/java", [100.0, 200.0])
    assert not series.shows_rise("default/java", "u1"), "two samples cannot tell a ramp from a level"
    assert series.rising_share() is None
    feed("default/level", [100.0, 102.0, 105.0])
    assert not series.shows_rise("default/level", "u1")
    assert not series.shows_rise("default/other", "u1"), "a pod never read"
    assert series.rising_share() == 0.0, "level at its first chance"
    feed("default/web", [50.0, 100.0, 200.0])
    assert series.shows_rise("default/web", "u1")
    feed("default/web", [50.0, 100.0, 200.0, 300.0, 301.0, 302.0])
    assert series.rising_share() == 0.5, "web rose at its third sample; later samples judge it no more"
    # Its first sample an average since its container started, read 2 s after it: low, then level.
    assert feed("default/api", [60.0, 100.0, 104.0]), "ramping by its span"
    assert not series.shows_rise("default/api", "u1"), "yet level past its first sample"
    assert series.rising_share() == pytest.approx(1 / 3)


@pytest.mark.parametrize(("rising", "held"), [(False, False), (True, True)])
def test_a_pod_measured_once_counts_at_its_sample_where_the_pods_before_it_were_level(
    rising: bool, held: bool
) -> None:
    loop = Loop(learned_metric())
    judge(loop, rising)
    loop.add(owned("new", "n1", cpu="1"))
    matrix = loop.sample({"new": 200.0})
    [shown] = loop.store.learned()["cpu"]["rampingPods"]
    assert loop.store.learned()["cpu"]["risingShare"] == (1.0 if rising else 0.0)
    if held:
        assert shown["counts"] > 200.0, "pods rose at their first chance: the larger of its estimate"
        assert matrix.values[1, 0] > NODE_VALUE + 0.2 / 4
    else:
        assert shown["counts"] == 200.0, "no pod rose at its first chance: its sample"
        assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 0.2 / 4)


def test_a_pod_younger_than_its_workloads_warm_up_is_held_whatever_the_share() -> None:
    loop = Loop(learned_metric())
    for n in range(3):
        judge(loop, rising=False, name=f"level-{n}")
    # java's first pod climbs for three samples, then levels: its workload warms up for a while.
    loop.add(owned("java-0", "n0", owner=("Deployment", "java")))
    for value in (100.0, 200.0, 300.0, 400.0, 402.0, 404.0):
        loop.sample({"java-0": value})
    learned = loop.store.learned()["cpu"]
    [warmup] = [w["warmup"] for w in learned["workloads"] if w["workload"] == "default/Deployment/java"]
    assert warmup is not None and warmup > 5
    assert loop.store.learned()["cpu"]["risingShare"] == 0.25
    now = loop.clock.now
    loop.add(
        owned("java-young", "n1", cpu="1", owner=("Deployment", "java"), bound_at=now),
        owned("java-old", "n2", cpu="1", owner=("Deployment", "java"), bound_at=now - 3 * warmup),
    )
    loop.sample({"java-young": 200.0, "java-old": 200.0})
    counts = {p["pod"]: p["counts"] for p in loop.store.learned()["cpu"]["rampingPods"]}
    full = counts["default/java-young"]
    assert full > 200.0, "younger than java's warm-up: the larger of its estimate"
    assert counts["default/java-old"] == pytest.approx(200.0 + 0.25 * (full - 200.0)), (
        "past it, its samples too few to tell: a quarter of the excess, as a quarter of pods rose"
    )


def test_a_level_workloads_next_pod_is_held_only_until_its_first_pod_read_its_level() -> None:
    """A workload whose pods use the same from their first scrape, with noise, teaches a
    warm-up of that first scrape's age, not of the read that took its pod as settled (the last
    of three): a replica measured past it counts at its sample where no pod rose."""
    loop = Loop(learned_metric())
    loop.add(owned("api-0", "n0", owner=("Deployment", "api")))
    for value in (480.0, 530.0, 505.0):
        loop.sample({"api-0": value})
    [warmup] = [w["warmup"] for w in loop.store.learned()["cpu"]["workloads"]]
    assert warmup == pytest.approx(4.0), "level from its first sample, 4 s after its bind"
    assert loop.store.learned()["cpu"]["risingShare"] == 0.0
    loop.add(owned("api-1", "n1", cpu="1", owner=("Deployment", "api"), bound_at=loop.clock.now))
    counts = []
    for value in (420.0, 440.0):
        loop.sample({"api-0": 500.0, "api-1": value})
        [shown] = loop.store.learned()["cpu"]["rampingPods"]
        counts.append(shown["counts"])
    assert counts[0] > 440.0, "2 s old: younger than its workload's warm-up, the larger of its estimate"
    assert counts[1] == 440.0, "4 s old, its samples show no rise where no pod rose: its sample"


def test_a_pod_whose_first_sample_read_low_counts_at_its_level_where_no_pod_rose() -> None:
    loop = Loop(learned_metric())
    judge(loop, rising=False)
    loop.add(owned("new", "n1", cpu="1"))
    for value in (60.0, 100.0, 104.0):
        matrix = loop.sample({"new": value})
    [shown] = loop.store.learned()["cpu"]["rampingPods"]
    assert shown["counts"] == 104.0, "ramping by its span from its low first sample, but no rise shown"
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 0.104 / 4)


def test_status_shows_the_share_when_no_pod_is_recent() -> None:
    loop = Loop(learned_metric())
    judge(loop, rising=True)
    loop.sample({})
    assert loop.store.learned()["cpu"]["risingShare"] == 1.0, "the judged pod left; what it showed stays"
