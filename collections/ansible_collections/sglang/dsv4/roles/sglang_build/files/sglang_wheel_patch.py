"""Apply a patch series to a pinned SGLang wheel and repack it with a local version.

    sglang_wheel_patch.py patch  --wheel W.whl --sha256 HEX --series DIR --out OUTDIR [--work DIR]
    sglang_wheel_patch.py unpack --wheel W.whl --sha256 HEX --tree DIR
    sglang_wheel_patch.py repack --tree DIR --wheel-name W.whl --local TAG --out OUTDIR

``patch`` does it all:
1. checks the wheel's sha256;
2. unpacks it;
3. dry-runs every patch of DIR/series in order (``git apply --check``); a patch
   that does not apply stops the build, naming itself;
4. applies them;
5. repacks the wheel as ``<version>+dsv4bf16.<series hash>``: the dist-info
   directory is renamed, METADATA's Version and every RECORD hash are rewritten.

``unpack`` and ``repack`` are steps 1-2 and 5 alone, for roles/sglang_build, which
applies the series itself (the same dry run and apply for a wheel as for a git fork)
and passes the local version (``dsv4bf16.<series hash>``) it computed.

Prints one JSON object: the output wheel, its sha256, the local version and the
series hash. Exit status 2 on a refused input, 3 on a patch that does not apply.
Standard library and ``git`` only: it runs on the build host.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

LOCAL_TAG = "dsv4bf16"


class PatchError(Exception):
    """A refused input or a patch that does not apply; exit_code tells which."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_series(series_dir: Path) -> list[Path]:
    """Patches in the order of series_dir/series (blank lines and # comments skipped)."""
    series = series_dir / "series"
    if not series.is_file():
        raise PatchError(f"{series} does not exist")
    names = [line.strip() for line in series.read_text().splitlines()]
    patches = [series_dir.resolve() / name for name in names if name and not name.startswith("#")]
    if not patches:
        raise PatchError(f"{series} names no patch")
    for patch in patches:
        if not patch.is_file():
            raise PatchError(f"{series} names {patch.name}, which does not exist")
    return patches


def series_hash(patches: list[Path]) -> str:
    """sha256 of the lines "<patch name> <patch sha256>", in order, joined by newlines; the first 12 hex go
    in the version. roles/sglang_build computes the same digest from its patch list."""
    listing = "\n".join(f"{patch.name} {sha256_file(patch)}" for patch in patches)
    return hashlib.sha256(listing.encode()).hexdigest()


def _git(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The ceiling keeps git from taking an enclosing repository for the tree's.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    return subprocess.run(["git", *args], cwd=tree, env=env, capture_output=True, text=True, check=False)


def apply_series(tree: Path, patches: list[Path]) -> None:
    """Dry-run then apply each patch in order; each check sees the earlier patches' result."""
    for index, patch in enumerate(patches):
        check = _git(tree, "apply", "--check", "--verbose", str(patch))
        if check.returncode != 0:
            raise PatchError(
                f"Patch {patch.name} does not apply after {index} earlier patch(es): {check.stderr.strip()}",
                exit_code=3,
            )
        done = _git(tree, "apply", str(patch))
        if done.returncode != 0:
            raise PatchError(f"Patch {patch.name} failed to apply: {done.stderr.strip()}", exit_code=3)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def relabel(tree: Path, version: str) -> tuple[str, str]:
    """Give the unpacked wheel a new version: dist-info dir, METADATA, RECORD. Returns (name, old version)."""
    infos = sorted(tree.glob("*.dist-info"))
    if len(infos) != 1:
        raise PatchError(f"expected one .dist-info directory in the wheel, found {len(infos)}")
    match = re.fullmatch(r"(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info", infos[0].name)
    if match is None:
        raise PatchError(f"unexpected dist-info name {infos[0].name}")
    name, old = match["name"], match["version"]
    info = tree / f"{name}-{version}.dist-info"
    infos[0].rename(info)
    metadata = info / "METADATA"
    text, count = re.subn(r"(?m)^Version: .*$", f"Version: {version}", metadata.read_text(), count=1)
    if count != 1:
        raise PatchError("METADATA has no Version field")
    metadata.write_text(text)
    record = info / "RECORD"
    rows = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        if path == record:
            continue
        data = path.read_bytes()
        rows.append([path.relative_to(tree).as_posix(), _record_hash(data), str(len(data))])
    rows.append([record.relative_to(tree).as_posix(), "", ""])
    # RECORD is CSV: some of SGLang's file names hold commas.
    with record.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    return name, old


def pack(tree: Path, out: Path) -> None:
    """Zip the tree as a wheel, dist-info last (as wheel tools do), with fixed timestamps."""
    files = sorted(p for p in tree.rglob("*") if p.is_file())
    files.sort(key=lambda p: (p.relative_to(tree).parts[0].endswith(".dist-info"), p.relative_to(tree).as_posix()))
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(tree).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o644 if not os.access(path, os.X_OK) else 0o755) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, path.read_bytes())


def check_wheel(wheel: Path, sha256: str) -> tuple[str, list[str]]:
    """Refuse a missing wheel, a wrong sha256 or a local version; return (base version, name parts)."""
    if not wheel.is_file():
        raise PatchError(f"wheel {wheel} does not exist")
    actual = sha256_file(wheel)
    if actual != sha256.lower():
        raise PatchError(f"wheel {wheel.name} has sha256 {actual}, expected {sha256}")
    return split_name(wheel.name)


def split_name(wheel_name: str) -> tuple[str, list[str]]:
    parts = wheel_name[: -len(".whl")].split("-") if wheel_name.endswith(".whl") else []
    if len(parts) < 5:
        raise PatchError(f"{wheel_name} is not a wheel file name")
    if "+" in parts[1]:
        raise PatchError(f"{wheel_name} already has a local version")
    return parts[1], parts


def unpack(wheel: Path, sha256: str, tree: Path) -> None:
    check_wheel(wheel, sha256)
    tree.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree)


def repack(tree: Path, wheel_name: str, local: str, out_dir: Path) -> dict[str, str]:
    """Relabel the (patched) unpacked tree as <version>+<local> and zip it into out_dir."""
    if not re.fullmatch(r"[A-Za-z0-9]+(\.[A-Za-z0-9]+)*", local):
        raise PatchError(f"{local!r} is not a local version label")
    base_version, parts = split_name(wheel_name)
    version = f"{base_version}+{local}"
    relabel(tree, version)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "-".join([parts[0], version, *parts[2:]]) + ".whl"
    partial = out_dir / (name + ".part")
    pack(tree, partial)
    partial.replace(out_dir / name)
    out = out_dir / name
    return {"wheel": str(out), "sha256": sha256_file(out), "version": version}


def patch_wheel(wheel: Path, sha256: str, series_dir: Path, out_dir: Path, work: Path | None = None) -> dict[str, str]:
    patches = read_series(series_dir)
    digest = series_hash(patches)
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        tree = Path(scratch) / "tree"
        unpack(wheel, sha256, tree)
        apply_series(tree, patches)
        result = repack(tree, wheel.name, f"{LOCAL_TAG}.{digest[:12]}", out_dir)
    return {**result, "series_sha256": digest, "patches": ",".join(p.name for p in patches)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("patch", help="check, unpack, apply the series, repack")
    one.add_argument("--wheel", type=Path, required=True)
    one.add_argument("--sha256", required=True)
    one.add_argument("--series", type=Path, required=True, help="directory holding the patches and `series`")
    one.add_argument("--out", type=Path, required=True)
    one.add_argument("--work", type=Path, default=None, help="scratch parent directory")
    unpacking = commands.add_parser("unpack", help="check the sha256 and unpack")
    unpacking.add_argument("--wheel", type=Path, required=True)
    unpacking.add_argument("--sha256", required=True)
    unpacking.add_argument("--tree", type=Path, required=True)
    repacking = commands.add_parser("repack", help="relabel an unpacked tree with a local version and zip it")
    repacking.add_argument("--tree", type=Path, required=True)
    repacking.add_argument("--wheel-name", required=True, help="file name of the wheel the tree came from")
    repacking.add_argument("--local", required=True, help="local version label, e.g. dsv4bf16.0123abcd4567")
    repacking.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "patch" and shutil.which("git") is None:
        print("git is required to apply the series", file=sys.stderr)
        return 2
    try:
        if args.command == "patch":
            result = patch_wheel(args.wheel, args.sha256, args.series, args.out, args.work)
        elif args.command == "unpack":
            unpack(args.wheel, args.sha256, args.tree)
            result = {"tree": str(args.tree)}
        else:
            result = repack(args.tree, args.wheel_name, args.local, args.out)
    except PatchError as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
