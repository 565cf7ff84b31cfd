"""Which releases a host keeps: the one rule of the release manager (roles/sglang_release) and the audit.

A release is a directory under the releases directory; it is complete once its manifest.json is written (the last
step of an install or a build, so the directory's mtime is then its completion time). A host keeps what its
`current` and `previous` links point at and the newest `keep` complete releases; everything else goes, incomplete
releases included (an install or build that did not finish).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def releases_to_prune(releases: Mapping[str, tuple[float, bool]], linked: Iterable[str], keep: int) -> list[str]:
    """Names to remove, sorted. `releases` maps name to (mtime, complete); `linked` names the link targets."""
    complete = sorted((name for name, (_started, done) in releases.items() if done), key=lambda n: releases[n][0])
    kept = set(linked) | set(complete[len(complete) - keep :] if keep > 0 else [])
    return sorted(name for name in releases if name not in kept)
