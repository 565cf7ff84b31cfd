"""Run SGLang 0.5.23's own Python on a CPU-only machine, as if on one H200 (SM90) of an 8-GPU host.

Imported first by the scripts that execute SGLang's code in the parser venv. It stubs only what needs CUDA
or is not installed there (triton, torchvision, the tvm/sgl kernel bindings, NVML) and makes torch report
H200s, so SGLang's platform detection, server-argument resolution and pool configurators take their GPU
paths. Nothing here computes a number of SGLang's: it only lets SGLang's code run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# H200 as torch reports it: 143,771 MiB, compute capability 9.0, 132 SMs.
H200_TOTAL_MEMORY = 143_771 * (1 << 20)
H200_CAPABILITY = (9, 0)
GPUS_PER_HOST = 8


class _Stub(types.ModuleType):
    """Stand-in module: attributes are stubs (classes for CamelCase names); used as a decorator it returns
    the function."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        value: object
        if name[:1].isupper():
            value = type(name, (), {"__module__": self.__name__, "__init__": lambda self, *a, **k: None})
        else:
            value = _Stub(f"{self.__name__}.{name}")
            value.__path__ = []  # type: ignore[attr-defined]
        setattr(self, name, value)
        return value

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return self


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every module under the given top-level names as a stub package."""

    def __init__(self) -> None:
        self.roots: set[str] = set()

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Stub(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        module.__version__ = "0.0.0"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _H200Properties:
    name = "NVIDIA H200"
    total_memory = H200_TOTAL_MEMORY
    major, minor = H200_CAPABILITY
    multi_processor_count = 132
    uuid = "GPU-00000000-0000-0000-0000-000000000000"
    L2_cache_size = 60 << 20


def install() -> None:
    """Stub the CUDA-only imports and present H200s to torch; call before importing sglang."""
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    finder.roots.add("triton")
    # transformers probes torchvision once and caches the answer; it must see it absent, SGLang imports it.
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()
    import_utils.is_torchvision_v2_available()
    finder.roots.update({"torchvision", "tvm_ffi", "sgl_kernel", "pynvml"})

    import torch

    torch.version.cuda = "12.9"  # type: ignore[misc]
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: GPUS_PER_HOST
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *a, **k: H200_CAPABILITY
    torch.cuda.get_device_properties = lambda *a, **k: _H200Properties()
    torch.cuda.get_device_name = lambda *a, **k: _H200Properties.name
    torch.cuda.mem_get_info = lambda *a, **k: (H200_TOTAL_MEMORY, H200_TOTAL_MEMORY)
