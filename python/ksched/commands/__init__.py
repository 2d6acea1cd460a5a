"""The ``ksched`` command line: thin entries that parse arguments and call the layers below.

:mod:`~ksched.commands.cli` assembles the parser; each command module adds its own
subparser and handler: :mod:`~ksched.commands.simulate` (``simulate``, ``explain``; the
live form reads through :mod:`~ksched.commands.live`), :mod:`~ksched.commands.run`,
:mod:`~ksched.commands.shadow` (``shadow report``, ``status``),
:mod:`~ksched.commands.demo`, :mod:`~ksched.commands.annotate`,
:mod:`~ksched.commands.bench` (which runs the harnesses of :mod:`ksched.bench`) and
:mod:`~ksched.commands.cluster`. Exit codes are :mod:`~ksched.commands.exit_codes`."""
