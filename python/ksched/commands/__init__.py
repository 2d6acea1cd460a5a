"""The ``ksched`` command line (:mod:`~ksched.commands.cli`) and its subcommands
that are more than a call into the loop: ``simulate``/``explain``, ``bench``,
``demo`` and ``annotate``."""
