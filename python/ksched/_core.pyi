"""Type stub of the Rust engine module (rust/python)."""

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NOT_ATTEMPTED", "UNSCHEDULABLE", "EngineInputError", "schedule"]

UNSCHEDULABLE: int
NOT_ATTEMPTED: int

class EngineInputError(ValueError): ...

def schedule(
    nodes: dict[str, Any],
    classes: dict[str, Any],
    pods: dict[str, Any],
    metric_values: npt.NDArray[np.float64],
    metric_specs: npt.NDArray[np.float64],
    profile: dict[str, Any],
    *,
    seed: int = 0,
    deadline_s: float | None = None,
    explain: int | None = None,
    parallel: bool = True,
) -> dict[str, Any]: ...
