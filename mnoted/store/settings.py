"""Settings files checked like requests: every key's type and range, unknown keys refused.

Both configuration files (the daemon's ``config.toml`` and a workspace's
``.mnote/config.toml``) are read through :func:`read_table`: a value of the wrong type
(``disabledTools = "mnote.page.get"``), out of range (``maxFileBytes = -1``, ``inf``,
``nan``) or a key nobody reads (a typo) is a :class:`WorkspaceInvalid` naming the file,
the key, the value and what it must be, never a traceback and never a silent default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mnoted.errors import WorkspaceInvalid


@dataclass(frozen=True)
class Setting:
    """One key: its kind (``int``, ``float``, ``bool``, ``str``, ``list``: a list of
    strings), its default, and for numbers the smallest and largest value allowed."""

    kind: str
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def rule(self) -> str:
        """What a value must be, in words (for messages and ``docs/daemon.md``)."""
        if self.kind in ("int", "float"):
            what = "a whole number" if self.kind == "int" else "a number"
            if self.low is not None and self.high is not None:
                return f"{what} from {_num(self.low)} to {_num(self.high)}"
            if self.low is not None:
                return f"{what} of at least {_num(self.low)}"
            return what
        if self.kind == "bool":
            return "true or false"
        if self.kind == "list":
            return 'a list of strings, e.g. ["a", "b"]'
        if self.choices:
            return "one of " + ", ".join(f'"{c}"' for c in self.choices)
        return "a string"


def _num(value: float) -> str:
    return f"{int(value):,}".replace(",", "_") if float(value).is_integer() else str(value)


def read_table(
    data: Mapping[str, Any],
    table: str | None,
    keys: Mapping[str, Setting],
    origin: str,
) -> dict[str, Any]:
    """The values of ``keys`` in ``[table]`` of ``data`` (the top level for None), each
    checked, with the default where a key is absent."""
    where = f"[{table}] " if table else ""
    raw: Any = data.get(table, {}) if table else data
    if not isinstance(raw, Mapping):
        raise WorkspaceInvalid(
            f"{origin}: [{table}] must be a table, not {_shown(raw)}",
            hint=f"Write it as a [{table}] section in {origin}.",
        )
    out: dict[str, Any] = {}
    for name, setting in keys.items():
        if name not in raw:
            out[name] = setting.default
            continue
        value = raw[name]
        checked = _check(value, setting)
        if checked is _BAD:
            raise WorkspaceInvalid(
                f"{origin}: {where}{name} = {_shown(value)} is not {setting.rule()}",
                hint=f"Set {name} to {setting.rule()} in {origin}, or remove the line "
                f"for the default ({_shown(setting.default)}).",
                file=origin,
                key=f"{table}.{name}" if table else name,
            )
        out[name] = checked
    return out


def unknown_keys(data: Mapping[str, Any], known: Mapping[str | None, Any], origin: str) -> None:
    """Refuse a key or table nobody reads (a typo would otherwise be a silent default).
    ``known`` maps each table (None: the top level) to its keys."""
    tables = {t for t in known if t is not None}
    for key, value in data.items():
        if key in tables:
            if isinstance(value, Mapping):
                for sub in value:
                    if sub not in known[key]:
                        _refuse_key(origin, f"[{key}] {sub}", known[key])
            continue
        if key not in known.get(None, {}):
            _refuse_key(origin, key, [*known.get(None, {}), *(f"[{t}]" for t in tables)])


def _refuse_key(origin: str, key: str, allowed: Any) -> None:
    raise WorkspaceInvalid(
        f"{origin}: unknown setting {key}",
        hint=f"Known here: {', '.join(allowed)}. Fix the name in {origin} or remove it.",
        file=origin,
        key=key,
    )


_BAD = object()


def _check(value: Any, setting: Setting) -> Any:
    kind = setting.kind
    if kind == "bool":
        return value if isinstance(value, bool) else _BAD
    if kind == "str":
        if not isinstance(value, str) or (setting.choices and value not in setting.choices):
            return _BAD
        return value
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return _BAD
        return list(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _BAD
    if kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                return _BAD
            value = int(value)
    elif not math.isfinite(value):
        return _BAD
    if setting.low is not None and value < setting.low:
        return _BAD
    if setting.high is not None and value > setting.high:
        return _BAD
    return float(value) if kind == "float" else int(value)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return "a table"
    return repr(value) if not isinstance(value, list) else "[" + ", ".join(map(_shown, value)) + "]"
