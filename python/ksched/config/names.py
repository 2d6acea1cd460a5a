"""Kubernetes' grammar for names, keys and label values: what the API server accepts, as
upstream apimachinery's ``validation`` package checks it (``IsQualifiedName``,
``IsValidLabelValue``, ``IsDNS1123Subdomain``, ``IsDNS1123Label``).

One copy for every reader: a label or taint key, a resource name, a label value, a Secret's or
a namespace's name. Each checks the whole text (``fullmatch``: a ``$`` anchor would let a
trailing newline through) and its length.
"""

from __future__ import annotations

import re

# A DNS-1123 label (a namespace's name) and subdomain (a Secret's name, a key's prefix).
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
# A qualified name's name part, and a label value: alphanumerics, '-', '_' and '.', starting
# and ending with an alphanumeric.
MAX_NAME = 63
_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def is_dns_label(text: str) -> bool:
    """A DNS-1123 label: at most 63 lowercase alphanumerics and '-', alphanumeric at both ends."""
    return len(text) <= MAX_DNS_LABEL and _DNS_LABEL_RE.fullmatch(text) is not None


def is_dns_subdomain(text: str) -> bool:
    """A DNS-1123 subdomain: dot-separated DNS labels, at most 253 characters."""
    return len(text) <= MAX_DNS_SUBDOMAIN and _DNS_SUBDOMAIN_RE.fullmatch(text) is not None


def is_qualified_name(text: str) -> bool:
    """A label key, taint key or resource name: a name of at most 63 characters, after an
    optional DNS-subdomain prefix and '/' (``app.kubernetes.io/name``, ``cpu``)."""
    prefix, slash, name = text.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(name) <= MAX_NAME and _NAME_RE.fullmatch(name) is not None


def is_label_value(text: str) -> bool:
    """A label value: empty, or a name of at most 63 characters."""
    return text == "" or (len(text) <= MAX_NAME and _NAME_RE.fullmatch(text) is not None)
