"""matplotlib for the benchmarks that draw a chart, looked for before a run starts.

matplotlib is the ``bench`` extra, not a dependency. A harness that draws calls
:func:`pyplot` before its run: where matplotlib is missing, one stderr line says so at
once and the harness skips its charts, still writing its table and JSON. Never raises
for a missing matplotlib, so a long run never ends on an ImportError.
"""

from __future__ import annotations

import sys
from typing import Any

MISSING = "matplotlib is not installed (pip install 'ksched[bench]'): the run writes its table and JSON but no charts"


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend, or None (said in one stderr line) where
    matplotlib cannot be imported."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(MISSING, file=sys.stderr, flush=True)
        return None
    return plt
