"""The ``ksched`` command line (:mod:`~ksched.commands.cli`) and its subcommands
that are more than a call into the loop: ``simulate``/``explain`` (a cluster
file, or the live cluster through :mod:`~ksched.commands.live`), ``shadow
report`` and ``status`` (:mod:`~ksched.commands.shadow`), ``bench``, ``demo``
and ``annotate``."""
