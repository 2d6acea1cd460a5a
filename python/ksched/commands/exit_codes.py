"""The exit codes every ``ksched`` command shares.

0 success, 1 some pod was not placed (``simulate``, ``explain``), a harness
found a defect or an invariant failed (``bench --fuzz``, ``bench --chaos``) or
a command failed, 2 bad input or configuration.
"""

EXIT_OK = 0
EXIT_UNPLACED = 1
EXIT_VIOLATED = 1  # bench --chaos: an invariant failed
EXIT_BAD_INPUT = 2
