"""PEP 517 backend of the dsv4-index-k wheel (in-tree, no build requirements).

Compiles csrc/fused_index_k.cu into libdsv4_index_k.so with one SASS image per
architecture and packs it with the headers and dsv4_index_k/. Environment:

  CMAKE_CUDA_ARCHITECTURES  "90a;100a;120a" (preferred), else
  TORCH_CUDA_ARCH_LIST      "9.0a;10.0a;12.0a" (spaces also accepted, "+PTX" ignored)
  CUDACXX / CUDA_HOME       nvcc to use (default: CUDA_HOME/bin/nvcc, then PATH)
  CMAKE_CUDA_COMPILER_LAUNCHER  e.g. ccache, put in front of nvcc
  MAX_JOBS                  upper bound for nvcc --threads
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile
from pathlib import Path

NAME = "dsv4_index_k"
DIST_NAME = "dsv4-index-k"
ROOT = Path(__file__).resolve().parent
DEFAULT_ARCHS = ("90a", "100a", "120a")
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def version() -> str:
    text = (ROOT / NAME / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if match is None:
        raise RuntimeError(f"no __version__ in {NAME}/__init__.py")
    return match.group(1)


def cuda_archs(environ: dict[str, str]) -> list[str]:
    """Architectures as CMake spells them: 90a, 100a, 120a."""
    cmake = environ.get("CMAKE_CUDA_ARCHITECTURES", "").strip()
    if cmake:
        archs = [a.strip() for a in cmake.split(";") if a.strip()]
    else:
        torch = environ.get("TORCH_CUDA_ARCH_LIST", "").replace("+PTX", "")
        archs = [a.replace(".", "") for a in re.split(r"[;\s]+", torch) if a]
    archs = archs or list(DEFAULT_ARCHS)
    for arch in archs:
        if not re.fullmatch(r"\d{2,3}[af]?", arch):
            raise ValueError(f"unsupported CUDA architecture {arch!r}")
    return archs


def nvcc_path(environ: dict[str, str]) -> str:
    candidates = [environ.get("CUDACXX"), os.path.join(environ.get("CUDA_HOME", "/usr/local/cuda"), "bin/nvcc")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return candidate
    found = shutil.which("nvcc")
    if found is None:
        raise RuntimeError("nvcc not found: set CUDACXX or CUDA_HOME")
    return found


def compile_library(out: Path, environ: dict[str, str]) -> tuple[Path, dict[str, object]]:
    nvcc = nvcc_path(environ)
    archs = cuda_archs(environ)
    threads = max(1, min(len(archs), int(environ.get("MAX_JOBS", "1") or "1")))
    launcher = environ.get("CMAKE_CUDA_COMPILER_LAUNCHER", "").split()
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    library = out / f"lib{NAME}.so"
    cmd = [*launcher, nvcc, "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC", f"--threads={threads}"]
    subprocess.run([*cmd, *gencode, str(ROOT / "csrc/fused_index_k.cu"), "-o", str(library)], check=True)
    nvcc_version = subprocess.run([nvcc, "--version"], check=True, capture_output=True, text=True).stdout
    release = re.search(r"release [\d.]+, (V[\d.]+)", nvcc_version)
    info = {"cuda_archs": archs, "nvcc_version": release.group(1) if release else nvcc_version.strip()}
    return library, info


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(directory: str, files: dict[str, bytes], tag: str) -> str:
    """Deterministic wheel: sorted members, fixed timestamps."""
    dist_info = f"{NAME}-{version()}.dist-info"
    files = dict(files)
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {version()}\n"
        "Summary: Fused DeepSeek-V4 indexer key kernel (RMSNorm, RoPE, fp8/bf16 paged store)\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: {DIST_NAME} wheel_backend\nRoot-Is-Purelib: false\nTag: {tag}\n"
    ).encode()
    record = [record_line(path, data) for path, data in sorted(files.items())]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    wheel_name = f"{NAME}-{version()}-{tag}.whl"
    with zipfile.ZipFile(Path(directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path in sorted(files):
            member = zipfile.ZipInfo(path, ZIP_EPOCH)
            member.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(member, files[path])
    return wheel_name


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, object] | None = None,
    metadata_directory: str | None = None,
) -> str:
    environ = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        library, info = compile_library(Path(tmp), environ)
        files = {f"{NAME}/{library.name}": library.read_bytes()}
    files[f"{NAME}/build_info.json"] = (json.dumps(info, sort_keys=True) + "\n").encode()
    files[f"{NAME}/__init__.py"] = (ROOT / NAME / "__init__.py").read_bytes()
    for header in sorted([*(ROOT / "csrc").glob("*.h"), *(ROOT / "csrc").glob("*.cuh")]):
        files[f"{NAME}/include/{header.name}"] = header.read_bytes()
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return write_wheel(wheel_directory, files, f"py3-none-{platform}")


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    return []
