"""Each recent pod's measured series, and whether it still ramps up.

:class:`PodSeries` keeps, per recent pod, its last few measured values. A pod ramps while its
usage still rises by more than ``RAMP_TOLERANCE`` over its last ``RAMP_SPAN`` samples (an
unchanged value read before the scrape cadence passed is the same sample), while it is younger
than its workload's learned warm-up, or while it has ``RAMP_SPAN`` samples or fewer; never past
the estimate's ``warmup``. A pod that stopped ramping is stable for good (usage that swings
later is the spread's business), and only stable pods teach their workload
(:class:`ksched.loop.metrics.workloads.WorkloadHistory`; a pod that succeeds before it settles,
a short Job's run, teaches at the highest value read of it). While a pod ramps, its climb over
its last samples (the slower of its last rises, each of which must rise) says how much more it
will use (:meth:`PodSeries.climb`).

A ramping pod whose samples do not show a rise (:meth:`PodSeries.shows_rise`: ``RAMP_SPAN`` of
them or fewer cannot tell a ramp from a level; later, its last above every earlier one of its
span by more than ``RAMP_TOLERANCE``) may be level: how often the pods before it showed a rise
at their first chance (their ``RAMP_SPAN + 1``-th sample: :meth:`PodSeries.rising_share`, over
the last ``JUDGED_MEMORY`` of them) is the chance that it still ramps. Where no pod ramps its
measured value is all but its usage; where every pod ramps it is a fraction of it.

Nothing here reads the cluster state or the clock: times come from the caller.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from dataclasses import dataclass
from itertools import pairwise

from ksched.config.estimate import DEFAULT_SCRAPE_INTERVAL_S

log = logging.getLogger(__name__)

# A pod still rises by more than this share over its last ``RAMP_SPAN`` samples: it is
# ramping up. Over one sample, a usage with noise (here, and in the load simulation: +-10 %
# a scrape) looks settled while it still climbs by a fifth a scrape; over two, a climb of 10 %
# a scrape is not hidden by noise of 10 %.
RAMP_TOLERANCE = 0.1
RAMP_SPAN = 2
# A pod's value that did not change is the same scrape read again (an instant query answers at
# the query's time, not the scrape's) until this many of the learned scrape cadences passed
# since its last new sample; the cadence is the median gap between changes of recent pods'
# values, over the last ``CADENCE_MEMORY`` changes.
SAME_SCRAPE_CADENCES = 1.5
CADENCE_MEMORY = 256
# How many pods' first verdicts (a rise shown or not, at their ``RAMP_SPAN + 1``-th sample) the
# share of rising pods is taken over.
JUDGED_MEMORY = 256


@dataclass
class _Series:
    uid: str
    at: float
    # Its last ``RAMP_SPAN + 1`` new samples, oldest first, and when each was read.
    values: deque[float]
    times: deque[float]
    stable: bool = False
    # The highest sample read of it (what a run that ends before it settles teaches).
    peak: float = 0.0
    # When its value was first read or last changed, and whether it has changed since; when
    # its last new sample was read (a change, or an unchanged value taken as a new scrape).
    changed_at: float = 0.0
    changed: bool = False
    news_at: float = 0.0
    # The warm-up its own samples said, where it was held ramping only by its workload's.
    level_age: float | None = None
    # How many new samples were read of it.
    samples: int = 1


class PodSeries:
    """Each recent pod's last few measured values, and whether it still ramps up.

    A value equal to the last one read is news only once the learned scrape cadence (times
    ``SAME_SCRAPE_CADENCES``) has passed since the pod's last new sample: ksched reads the
    pod query more often than Prometheus scrapes, and the same scrape read twice would
    otherwise end a ramp at its first unchanged reading. Until any pod's value changed twice,
    the cadence is unknown and ``scrape_interval_s`` (the estimate's ``scrapeInterval``)
    stands in for it: else the pods measured in a fresh ksched's first scrape interval would
    settle on their first repeated reads, at a fraction of what they will use."""

    def __init__(self, scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S) -> None:
        self._pods: dict[str, _Series] = {}
        self._gaps: deque[float] = deque(maxlen=CADENCE_MEMORY)
        self._scrape_interval_s = scrape_interval_s
        # The cadence, and the sample time it was computed for (once a cycle).
        self._cadence: tuple[float, float | None] = (-1.0, None)
        # Per pod judged, oldest first: whether it showed a rise at its first chance.
        self._judged: deque[bool] = deque(maxlen=JUDGED_MEMORY)

    def cadence(self, at: float) -> float | None:
        """The median seconds between changes of recent pods' measured values, as of the
        sample at ``at`` (None: none changed twice yet)."""
        if self._cadence[0] != at:
            self._cadence = (at, statistics.median(self._gaps) if self._gaps else None)
        return self._cadence[1]

    def rising_share(self) -> float | None:
        """The share of the last judged pods that showed a rise at their first chance (their
        ``RAMP_SPAN + 1``-th sample, :func:`_shows_rise`): the chance that a ramping pod whose
        samples show none still ramps up. None before any pod was judged."""
        return sum(self._judged) / len(self._judged) if self._judged else None

    def shows_rise(self, key: str, uid: str) -> bool:
        """Whether the samples of the pod ``key`` (``uid``) show it rising (:func:`_shows_rise`);
        False for a pod never read, or read ``RAMP_SPAN`` times or fewer: too few to tell."""
        s = self._pods.get(key)
        return s is not None and s.uid == uid and _shows_rise(s)

    def _news(self, s: _Series, at: float, value: float) -> bool:
        """Whether ``value`` read at ``at`` is a new sample of the pod ``s``; learns the
        cadence from the gaps between changes."""
        if value != s.values[-1]:
            if s.changed:
                self._gaps.append(at - s.changed_at)
            s.changed_at, s.changed, s.news_at = at, True, at
            return True
        cadence = self.cadence(at)
        if at - s.news_at < SAME_SCRAPE_CADENCES * (self._scrape_interval_s if cadence is None else cadence):
            return False
        s.news_at = at
        return True

    def forget(self, key: str, uid: str) -> float | None:
        """The pod ``key`` (``uid``) left: the highest sample read of it where it never
        settled (a short Job's run ends before its series can show a stable value), else None."""
        s = self._pods.pop(key, None)
        return s.peak if s is not None and s.uid == uid and not s.stable else None

    def climb(self, key: str, uid: str, age: float, warmup: float | None, cap: float) -> float:
        """How much more than its last sample the ramping pod ``key`` (``age`` seconds after its
        bind) is expected to use once it levels off: its climb per second, carried on for its
        workload's learned warm-up (``warmup``) less its age, or where none is learned for as
        long again as it has ramped so far, never past the estimate's ``warmup`` (``cap``), and
        at most its last sample again. Its climb per second is the slower of its rises between
        each two of its last ``RAMP_SPAN + 1`` samples: a climb is a trend, so every step of the
        span rises, and the slower one is what a ramp that levels off, or a sample that read
        high once, still says. A step up (a burst, a noisy sample) rises once and is no climb.
        The slower rise also reads a climb from a span that holds the pod's first sample: a rate
        whose window began before the pod's first scrape, or a pod query's average since the
        container started (``examples/load-aware.yaml``), reads below what the pod uses then, so
        the rise from it is the faster one, and is not taken.

        0.0 where it does not climb by more than ``RAMP_TOLERANCE`` over its span, where a step
        of the span does not rise, or where it has ``RAMP_SPAN`` samples or fewer."""
        s = self._pods.get(key)
        if s is None or s.uid != uid or s.stable or s.samples <= RAMP_SPAN:
            return 0.0
        if s.values[-1] - s.values[0] <= s.values[0] * RAMP_TOLERANCE:
            return 0.0
        # More than RAMP_SPAN samples fill the span; a sample is new only at a later time.
        points = zip(s.times, s.values, strict=True)
        slower = min((v1 - v0) / (t1 - t0) for (t0, v0), (t1, v1) in pairwise(points))
        remaining = min(age if warmup is None else warmup - age, cap - age)
        if slower <= 0 or remaining <= 0:
            return 0.0
        return min(slower * remaining, s.values[-1])

    def ramping(
        self, key: str, uid: str, at: float, value: float, age: float, warmup: float | None, cap: float
    ) -> tuple[bool, float | None, bool]:
        """Whether the pod ``key`` (``age`` seconds after its bind, measured ``value`` at ``at``)
        still ramps up; where it just stopped, its warm-up (else None); and whether ``value`` is a
        new sample of it, or a value to teach (the read that first takes it as settled).
        ``warmup``: its workload's learned warm-up; ``cap``: the estimate's ``warmup``.

        The warm-up is its age at the first sample of the span that reads level: from then on
        its samples no longer read below what it uses, which is what a warm-up tells of its
        workload's next pods. Not its age when it is taken as settled, two samples later (nor
        when its value last changed: with noise, that is the same read), else a workload that
        uses the same from its first scrape would teach a warm-up of three scrapes, and hold its
        next pods at their estimate for that long; nor a wait for the same value to be read
        again (a whole ``scrapeInterval`` each while the cadence is unknown). A pod held ramping
        by its workload's warm-up alone, its samples level, teaches when they first were."""
        s = self._pods.get(key)
        fresh = s is None or s.uid != uid or (at > s.at and self._news(s, at, value))
        if s is None or s.uid != uid:
            s = self._pods[key] = _Series(
                uid,
                at,
                deque([value], maxlen=RAMP_SPAN + 1),
                deque([at], maxlen=RAMP_SPAN + 1),
                changed_at=at,
                news_at=at,
                peak=value,
            )
        elif fresh:
            s.peak = max(s.peak, value)
            s.values.append(value)
            s.times.append(at)
            s.samples += 1
            s.at = at
        if s.stable:
            return False, None, fresh
        if age >= cap:
            # Its value teaches now, a new sample or not: it counts as measured from this read;
            # where its samples read level before (held by its workload's warm-up), so does that.
            s.stable = True
            log.debug(
                "pod %s taken as settled at the warm-up cap (%.0fs): last samples %s",
                key,
                cap,
                list(s.values),
            )
            return False, s.level_age, True
        if not fresh:
            return True, None, False  # the same sample: it settles (and teaches) on the next
        rising = len(s.values) <= RAMP_SPAN or s.values[-1] > s.values[0] * (1.0 + RAMP_TOLERANCE)
        if s.samples == RAMP_SPAN + 1:
            self._judged.append(_shows_rise(s))
        if rising:
            s.level_age = None
            return True, None, fresh
        # Its age at the first sample of its level span (None where the bind time is ahead of
        # the samples' clock: nothing to teach).
        own = age - (at - s.times[0])
        own_warmup = own if own > 0 else None
        if warmup is not None and age < min(warmup, cap):
            # Level, yet younger than its workload's warm-up: it counts as ramping, and teaches
            # the warm-up its own samples say, else the workload's would only ever grow.
            if s.level_age is None:
                s.level_age = own_warmup
            return True, None, fresh
        s.stable = True
        warmed = own_warmup if s.level_age is None else s.level_age
        log.debug(
            "pod %s settled %.0fs after its bind (warmed by %ss): last samples %s, scrape cadence %s",
            key,
            age,
            None if warmed is None else round(warmed),
            list(s.values),
            self.cadence(at),
        )
        return False, warmed, fresh


def _shows_rise(s: _Series) -> bool:
    """Whether the pod's last sample is above every earlier one of its span by more than
    ``RAMP_TOLERANCE``, with more than ``RAMP_SPAN`` samples read. Not its first alone: that may
    read low (an average since its container started, a rate whose window began before it did)
    where the pod used the same from the start; such a pod still ramps by its span until its
    first sample leaves it, yet shows no rise."""
    return s.samples > RAMP_SPAN and s.values[-1] > max(list(s.values)[:-1]) * (1.0 + RAMP_TOLERANCE)
