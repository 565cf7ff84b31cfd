"""Scripted load and fault profiles, switchable at runtime (`POST /sim/profile`) or at start (SGLANG_SIM_PROFILE).

A profile changes what the simulated engine does, not what it reports: the metrics, /v1/loads and the request
paths then show the consequences the way SGLang would.

- `normal`: no scripted load, no fault. A switch ends the scripted requests of the profile before.
- `load`: `load` scripted requests kept in flight (each `prompt_tokens` long, `output_tokens` generated).
- `kv_fill`: `kv_fill` of each rank's KV pool is held (as by long-lived requests: `sglang:num_used_tokens`,
  `token_usage`); requests that do not fit in the rest wait, and growing ones are retracted.
- `decode_stall`: the scheduler stops producing tokens while `/health` stays 200; scripted requests keep the
  running batch non-empty.
- `bootstrap_fail` (decode): every KV handshake with the prefill fails as a dead prefill does; scripted requests
  that carry a bootstrap room keep the failures coming.

A restart with another context length is a restart with another --context-length (no profile needed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any


class ProfileError(ValueError):
    """A profile name or parameter the simulator does not know."""


@dataclass(frozen=True)
class Profile:
    name: str = "normal"
    load: int = 0  # scripted requests kept in flight
    prompt_tokens: int = 1024
    output_tokens: int = 256
    kv_fill: float = 0.0  # share of the KV pool long-lived requests hold
    stall: bool = False
    bootstrap_fail: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PROFILES: dict[str, Profile] = {
    "normal": Profile(),
    "load": Profile("load", load=8),
    "kv_fill": Profile("kv_fill", kv_fill=0.98),
    "decode_stall": Profile("decode_stall", load=4, stall=True),
    "bootstrap_fail": Profile("bootstrap_fail", load=2, bootstrap_fail=True),
}


def parse(body: Mapping[str, Any] | str) -> Profile:
    """A profile from a name, or from {"profile": name, <parameter>: value, ...}; clear errors on bad input."""
    if isinstance(body, str):
        body = {"profile": body}
    name = body.get("profile", "normal")
    if name not in PROFILES:
        raise ProfileError(f"profile={name!r} is not a simulator profile; known: {', '.join(PROFILES)}")
    base = PROFILES[name]
    kinds = {f.name: type(getattr(base, f.name)) for f in fields(Profile) if f.name != "name"}
    changes: dict[str, Any] = {}
    for key, value in body.items():
        if key == "profile":
            continue
        if key not in kinds:
            raise ProfileError(f"{key}={value!r}: not a profile parameter; known: {', '.join(kinds)}")
        kind = kinds[key]
        ok = isinstance(value, bool) if kind is bool else isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise ProfileError(f"{key}={value!r}: must be a {kind.__name__}")
        changes[key] = kind(value)
    profile = replace(base, **changes)
    if not 0.0 <= profile.kv_fill < 1.0:
        raise ProfileError(f"kv_fill={profile.kv_fill!r}: must lie in [0, 1), a share of the KV pool")
    if profile.load < 0 or profile.prompt_tokens < 1 or profile.output_tokens < 1:
        raise ProfileError("load must be >= 0, prompt_tokens and output_tokens >= 1")
    return profile
