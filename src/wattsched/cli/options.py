"""CLI flags generated from the typed run config, so that a new setting is one edit (the config field).

Every leaf field of :class:`~wattsched.experiments.config.SimulationConfig` (nested models included) becomes an
option named after the field (``round_s`` -> ``--round-s``; a nested field by its own name, e.g.
``power_states.boot_time_s`` -> ``--boot-time-s``), unless its metadata names another flag (``{"cli": "--jobs"}``).
Booleans get ``--x/--no-x``. Mappings and lists are config-file only. Unset flags are None and leave the config
file's or the default value alone.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel
from rich.markup import escape


@dataclass(frozen=True)
class ConfigOption:
    path: tuple[str, ...]  # field path in the config, e.g. ("power_states", "boot_time_s")
    flag: str  # "--boot-time-s"
    param: str  # Python parameter name of the generated function
    kind: type  # str, int, float or bool
    help: str


def _unwrap(annotation: Any) -> tuple[Any, list[str] | None]:
    """(scalar type, Literal choices) of an annotation such as `float | None` or `Literal[...] | None`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else (None, None)
    if origin is Literal:
        return str, [str(a) for a in typing.get_args(annotation)]
    return annotation, None


def config_options(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[ConfigOption]:
    out: list[ConfigOption] = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        annotation, choices = _unwrap(info.annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += config_options(annotation, (*prefix, name))
            continue
        if extra.get("cli_hidden") or annotation not in (str, int, float, bool, datetime):
            continue  # mappings, lists: config file only
        flag = extra.get("cli") or "--" + name.replace("_", "-")
        help_text = info.description or ""
        if choices and not help_text:
            help_text = " | ".join(choices)
        default = info.get_default(call_default_factory=False)
        if default is not None and not isinstance(default, BaseModel):
            help_text += f" [default: {default}]" if "[default" not in help_text else ""
        kind = str if annotation is datetime else annotation
        param = "opt_" + "_".join((*prefix, name))
        out.append(ConfigOption((*prefix, name), flag, param, kind, help_text.strip()))
    flags = [o.flag for o in out]
    dup = {f for f in flags if flags.count(f) > 1}
    if dup:
        raise ValueError(f"config fields map to the same CLI flag(s): {', '.join(sorted(dup))}")
    return out


def _parameter(opt: ConfigOption) -> inspect.Parameter:
    decl = f"{opt.flag}/--no-{opt.flag[2:]}" if opt.kind is bool else opt.flag
    # Escaped: rich would read "[default: x]" as a style tag and drop it.
    annotation = Annotated[opt.kind | None, typer.Option(decl, help=escape(opt.help), show_default=False)]
    return inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def overrides_from(options: list[ConfigOption], values: dict[str, Any]) -> dict[str, Any]:
    """Nested override dict from the given (non-None) flag values."""
    out: dict[str, Any] = {}
    for opt in options:
        value = values.get(opt.param)
        if value is None:
            continue
        node = out
        for key in opt.path[:-1]:
            node = node.setdefault(key, {})
        node[opt.path[-1]] = value
    return out


def command_with_config_options(
    model: type[BaseModel],
    extra: list[inspect.Parameter],
    handler: Callable[[dict[str, Any], dict[str, Any]], None],
    doc: str,
) -> Callable[..., None]:
    """A function typer can register: the `extra` parameters plus one option per config field; it calls
    `handler(overrides, extra_values)`."""
    options = config_options(model)
    extra_names = [p.name for p in extra]

    def command(**kwargs: Any) -> None:
        handler(overrides_from(options, kwargs), {k: kwargs[k] for k in extra_names})

    params = [*extra, *(_parameter(o) for o in options)]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = doc
    command.config_options = options  # type: ignore[attr-defined]
    return command
