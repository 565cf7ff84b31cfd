"""What validation's access.key_beyond_loopback guards against, shown with the real smg 1.13.0 in front of two
simulated engines on loopback: with --api-key, a call without the key gets 401; without --api-key, anyone who
reaches the port is served, and the router passes no key on to the engines."""

from __future__ import annotations

import httpx
from simtools import Launcher

BODY = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}


def _router(launcher: Launcher, *key: str) -> str:
    return launcher.pd_router(["--context-length", "8192", *key], list(key))[1]


def test_with_a_key_a_call_without_it_gets_401(launcher: Launcher) -> None:
    url = _router(launcher, "--api-key", "k3y")
    assert httpx.post(url + "/generate", json=BODY, timeout=30).status_code == 401
    served = httpx.post(url + "/generate", json=BODY, headers={"Authorization": "Bearer k3y"}, timeout=30)
    assert served.status_code == 200, served.text


def test_without_a_key_anyone_is_served(launcher: Launcher) -> None:
    url = _router(launcher)
    served = httpx.post(url + "/generate", json=BODY, timeout=30)
    assert served.status_code == 200, served.text
