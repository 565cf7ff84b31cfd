"""Where the controller's tools and data are: the project directory and, under it by default, the venvs, caches,
models and reports. Each is a setting with a documented default (docs/install.md), read from the environment:

    SGLANG_DSV4_HOME          the project directory: the inventories, models/ and reports/ (default below)
    SGLANG_DSV4_PARSER_VENV   SGLang 0.5.23's parser venv (default HOME/.cache/sglang-parser-venv, make parser-venv)
    SGLANG_DSV4_PERF_VENV     AIConfigurator's venv, the time model (default HOME/.cache/aiconfigurator-venv)
    SGLANG_DSV4_PERF_CACHE    the time model's answers (default HOME/.cache/perf)
    SGLANG_DSV4_MODELS_DIR    the models' config.json files (default HOME/models)

The default project directory is the checkout this collection sits in, when it is used in place
(collections/ansible_collections/sglang/dsv4 with its galaxy.yml, beside an ansible.cfg), else the current
directory: an installed collection (~/.ansible/collections) reads the project it is run from."""

from __future__ import annotations

import os
from pathlib import Path

_COLLECTION = Path(__file__).resolve().parents[2]


def project_dir() -> Path:
    home = os.environ.get("SGLANG_DSV4_HOME")
    if home:
        return Path(home)
    checkout = _COLLECTION.parents[3]
    # In place: the collection's source (galaxy.yml; an installed one has MANIFEST.json instead) in a checkout.
    in_place = _COLLECTION.parts[-4:-2] == ("collections", "ansible_collections")
    if in_place and (_COLLECTION / "galaxy.yml").is_file() and (checkout / "ansible.cfg").is_file():
        return checkout
    return Path.cwd()


def _setting(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value) if value else default


def parser_venv() -> Path:
    return _setting("SGLANG_DSV4_PARSER_VENV", project_dir() / ".cache" / "sglang-parser-venv")


def perf_venv() -> Path:
    return _setting("SGLANG_DSV4_PERF_VENV", project_dir() / ".cache" / "aiconfigurator-venv")


def perf_cache() -> Path:
    return _setting("SGLANG_DSV4_PERF_CACHE", project_dir() / ".cache" / "perf")


def models_dir() -> Path:
    return _setting("SGLANG_DSV4_MODELS_DIR", project_dir() / "models")
