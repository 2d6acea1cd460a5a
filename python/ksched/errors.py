"""Exceptions ksched raises for bad input, each naming what is wrong and where."""

from __future__ import annotations


class KschedError(Exception):
    """Base class of every error ksched reports to users."""


class ConfigError(KschedError):
    """The configuration file is invalid; the message names the key path."""


class QuantityError(KschedError, ValueError):
    """A Kubernetes quantity string could not be parsed."""


class MalformedObjectError(KschedError):
    """A pod or node cannot be scheduled as written; the message names the object and field."""

    def __init__(self, obj: str, field: str, problem: str) -> None:
        super().__init__(f"{obj}: {field}: {problem}")
        self.obj = obj
        self.field = field
        self.problem = problem


class ClusterFileError(KschedError):
    """A cluster file (YAML or JSON objects) could not be read."""
