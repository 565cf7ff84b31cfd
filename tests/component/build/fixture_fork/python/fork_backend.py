"""Minimal PEP 517 backend: packs sglang/ into a pure-Python wheel."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _record(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, object] | None = None,
    metadata_directory: str | None = None,
) -> str:
    init = (ROOT / "sglang/__init__.py").read_text()
    version = re.search(r'__version__ = "([^"]+)"', init).group(1)  # type: ignore[union-attr]
    files = {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in sorted((ROOT / "sglang").rglob("*.py"))}
    dist_info = f"sglang-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n".encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: fork_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record(path, data) for path, data in sorted(files.items())]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    name = f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as wheel:
        for path in sorted(files):
            wheel.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), files[path])
    return name
