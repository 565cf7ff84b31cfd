# Copyright: the sglang.dsv4 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import the collection's Python once, in the controller's main process."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Import the collection's Python once, before any task runs
description:
  - Ansible runs each task in a worker process forked from its main process. A filter, lookup or action of this
    collection that imports C(plugin_utils) or C(module_utils) pays that import again in every task's worker
    (30 to 250 ms a task).
  - This callback imports every module of C(plugins/plugin_utils) and C(plugins/module_utils) when Ansible loads it,
    in the main process, so each worker inherits them already imported.
  - It also loads the collection's filter plugins through Ansible's plugin loader there. Otherwise each worker whose
    task names one of them finds, reads and runs C(plugins/filter/sglang.py) again (on the lab, an unchanged
    C(site.yml) spent about 1.5 s of CPU on that).
  - It changes no output and no result. Enable it in C(ansible.cfg) (C(callbacks_enabled = sglang.dsv4.preload)),
    as this repository's C(ansible.cfg) does.
requirements: []
"""

import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

display = Display()

PACKAGES = (
    "ansible_collections.sglang.dsv4.plugins.module_utils",
    "ansible_collections.sglang.dsv4.plugins.plugin_utils",
)
FILTERS = "ansible_collections.sglang.dsv4.plugins.filter"


def preload(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Import every module of `packages`; return the modules that failed, each with its error."""
    failed: list[str] = []
    for name in packages:
        package = importlib.import_module(name)
        for info in pkgutil.iter_modules(package.__path__):
            module = f"{name}.{info.name}"
            try:
                importlib.import_module(module)
            except Exception as exc:  # a module that fails here fails again, named, in its task
                failed.append(f"{module}: {exc}")
    return failed


def preload_filters(package: str = FILTERS) -> list[str]:
    """Load each filter plugin file of `package` through Ansible's filter loader (its resolution and its module are
    then cached in this process); return the files that failed, each with its error."""
    from ansible.plugins.loader import filter_loader

    collection = ".".join(package.split(".")[1:3])
    failed: list[str] = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = f"{package}.{info.name}"
        try:
            first = next(iter(importlib.import_module(module).FilterModule().filters()))
            if filter_loader.get(f"{collection}.{first}") is None:
                failed.append(f"{module}: Ansible's filter loader does not find {collection}.{first}")
        except Exception as exc:  # the task that names the filter fails again, with Ansible's own words
            failed.append(f"{module}: {exc}")
    return failed


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang.dsv4.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        for problem in preload() + preload_filters():
            display.warning(f"sglang.dsv4.preload could not import {problem}; the task that needs it will say why")
