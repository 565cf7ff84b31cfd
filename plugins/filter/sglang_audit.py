"""Jinja filter of the limits audit: gather the records the audit kept on each host."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def audit_records(hostvars: Mapping[str, Any], hosts: Sequence[str]) -> list[dict[str, Any]]:
    """Every record of `hosts` (their `sglang_audit_records`); a host without records is reported unreachable."""
    records: list[dict[str, Any]] = []
    for host in hosts:
        kept = hostvars[host].get("sglang_audit_records") if host in hostvars else None
        if kept is None:
            records.append({"host": host, "role": "host", "host_unreachable": "the audit did not read this host"})
        else:
            records += [_plain(r) for r in kept]
    return records


class FilterModule:
    """sglang_audit_* filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_audit_records": audit_records}
