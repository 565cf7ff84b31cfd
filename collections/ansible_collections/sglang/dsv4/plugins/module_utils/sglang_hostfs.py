"""A file's identity on a host, as the deploy and the audit both compare it: SHA-1 (Ansible's checksum), owner and
group names (the id where the host has no name for it), and the mode as 4 octal digits; and the folders made on the
way to a file. Stdlib only: it runs in the modules, the drift exporter and the verify snapshot."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
from collections.abc import Mapping
from typing import Any


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def ownership(st: os.stat_result) -> dict[str, str]:
    """{owner, group, mode} of a stat result."""
    return {"owner": user_name(st.st_uid), "group": group_name(st.st_gid), "mode": f"{stat.S_IMODE(st.st_mode):04o}"}


def sha1(path: Any) -> str | None:
    """The file's SHA-1 read in blocks (Ansible's checksum), None where it does not exist."""
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except (FileNotFoundError, ProcessLookupError):
        return None
    return digest.hexdigest()


def meta_differs(have: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """The keys of owner, group and mode in which two entries differ."""
    return [k for k in ("owner", "group", "mode") if str(have.get(k)) != str(want.get(k))]


def files_to_write(files: Mapping[str, Mapping[str, Any]], wanted: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The server files a deploy must write: `wanted` {name: {path, sha1, owner, group, mode}} against what the host
    has (sglang_layers with checksums): absent, at another path, other content, or other owner, group or mode."""
    out = []
    for name, want in wanted.items():
        have = files.get(name) or {}
        same_file = have.get("exists") and have.get("path") == want["path"] and have.get("sha1") == want["sha1"]
        if not same_file or meta_differs(have, want):
            out.append(name)
    return out


def make_folders(folder: str) -> None:
    """`folder` and each missing one above it, mode 0755 whatever the umask (os.makedirs gives the folders above the
    last the umask's mode: 0777 under umask 0). A folder another process makes meanwhile is passed over."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for made in reversed(missing):
        try:
            os.mkdir(made)
        except FileExistsError:  # another process made it meanwhile (the render of another host, in its fork)
            continue
        os.chmod(made, 0o755)
