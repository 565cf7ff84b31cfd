"""The flags SGLang 0.5.23 and smg 1.13.0 accept, from their own argument tables (sglang_argtable.py,
smg_argtable.py, generated from the real parsers): option strings, type, nargs, choices and default per dest.

The schema takes each key's flag and type from here, the codec parses back with them, validation checks
choices against them and the simulator builds its parser from them.
"""

from __future__ import annotations

import difflib
from typing import Any, NamedTuple

from .sglang_argtable import ROWS as _SGLANG_ROWS
from .smg_argtable import ROWS as _SMG_ROWS


class Flag(NamedTuple):
    options: tuple[str, ...]
    dest: str
    type: str | None  # the parser's type function name: int, float, str, human_readable_int, ...
    nargs: int | str | None
    choices: list[Any] | None
    default: Any
    action: str  # argparse action class name

    @property
    def kind(self) -> str:
        """The envelope value type this flag carries: bool, int, float, size, intlist, strlist or str."""
        if self.nargs == 0:
            return "bool"
        if self.nargs in ("+", "*") and self.type in ("int", "str"):
            return f"{self.type}list"
        return {"int": "int", "float": "float", "human_readable_int": "size"}.get(str(self.type), "str")


SGLANG: dict[str, Flag] = {row[1]: Flag(*row) for row in _SGLANG_ROWS}
SMG: dict[str, Flag] = {row[1]: Flag(*row) for row in _SMG_ROWS}
SGLANG_ROWS: tuple[Flag, ...] = tuple(Flag(*row) for row in _SGLANG_ROWS)
SMG_ROWS: tuple[Flag, ...] = tuple(Flag(*row) for row in _SMG_ROWS)


def table_for(role: str) -> dict[str, Flag]:
    """SGLang's table for the engine roles, smg's for the router."""
    return SMG if role == "router" else SGLANG


def default_of(role: str, key: str) -> Any:
    """What the role's parser (SGLang's or smg's) takes for `key` when it is not given."""
    return table_for(role)[key].default


def did_you_mean(value: Any, candidates: Any) -> str:
    """` (did you mean X?)` for the closest candidate, or an empty string."""
    near = difflib.get_close_matches(str(value), [str(c) for c in candidates])  # best first
    return f" (did you mean {near[0]}?)" if near else ""


def choice_problem(role: str, name: str, value: Any) -> str | None:
    """The rule a value breaks when the parser's choices for `name` do not include it, else None."""
    flag = table_for(role).get(name)
    if flag is None or flag.choices is None or value is None or value in flag.choices:
        return None
    parser = "smg 1.13.0" if role == "router" else "SGLang 0.5.23"
    return (
        f"not one of {parser}'s choices for {flag.options[0]}{did_you_mean(value, flag.choices)}; "
        f"fix: use one of {', '.join(map(str, flag.choices))}"
    )
