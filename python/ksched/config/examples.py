"""The example configurations ksched ships: ``ksched/examples/`` inside the package.

The files live in the package so that a wheel carries them (a checkout's top-level
``examples/`` is a symlink to the same folder, one copy of each file). They are found
through :mod:`importlib.resources` from wherever ksched is imported, never from a
checkout's layout or the working directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ksched.errors import KschedError

# The package folder that holds them.
FOLDER = "examples"


def example_path(name: str) -> Path:
    """The shipped example ``name`` (say ``"load-aware.yaml"`` or ``"recipes/cpu-p95.yaml"``)
    as a file path inside the installed package, whether or not the file is there.

    >>> example_path("load-aware.yaml").name
    'load-aware.yaml'
    """
    shipped = resources.files("ksched").joinpath(FOLDER, *name.split("/"))
    # ksched carries a native extension, so it is imported from files, never from a zip.
    if not isinstance(shipped, Path):
        raise KschedError(f"ksched is not installed as files ({shipped}): {name} cannot be read from it")
    return shipped
