"""Text from a user's objects made safe to print: names come from files and the API server,
and a newline or terminal escape in one must not forge a line or recolour the terminal.

Every command's human output (tables, explanations, ``error:`` lines) goes through
:func:`printable`; JSON output is escaped by its encoder.
"""

from __future__ import annotations

import re

# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with each control character as its Python escape (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
