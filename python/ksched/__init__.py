"""ksched: a metrics-aware Kubernetes scheduler with a Rust scoring core.

The public surface is small: :class:`ksched.engine.Engine` schedules pods
from Kubernetes objects, :func:`ksched.config.load_config` reads a
``KschedConfiguration``, and the ``ksched`` command line drives both.
"""

__version__ = "0.1.0"
