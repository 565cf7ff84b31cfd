"""Every SGLang 0.5.23 `serve` flag, in the order its parser registers them.

Rows are (option strings, nargs, value type, dest), a view of SGLang's own argument table
(ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec, generated from the real parser). The simulator
models some of them (cli.MODELLED) and accepts the rest. Registering all of them, in this order, keeps argparse prefix
matching (allow_abbrev) and its error texts the same as the real parser's: a removed flag that is a prefix of several
current ones is ambiguous here too.
"""

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SGLANG_ROWS, Flag


def _row(flag: Flag) -> tuple[tuple[str, ...], str, str, str]:
    nargs = "0" if flag.nargs == 0 else "1" if flag.nargs is None else str(flag.nargs)
    kind = {"int": "int", "float": "float", "human_readable_int": "size"}.get(str(flag.type), "str")
    return flag.options, nargs, kind, flag.dest


SGLANG_FLAGS: tuple[tuple[tuple[str, ...], str, str, str], ...] = tuple(_row(f) for f in SGLANG_ROWS)
