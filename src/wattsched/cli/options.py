"""CLI flags generated from the typed run config, so that a new setting is one edit (the config field).

Every leaf field of :class:`~wattsched.experiments.config.SimulationConfig` (its groups and nested models included)
becomes an option named after the field itself, not its path (``scheduler.round_s`` -> ``--round-s``,
``energy.power_states.boot_time_s`` -> ``--boot-time-s``), unless its metadata names another flag
(``{"cli": "--jobs"}``, ``workload.name`` -> ``--workload``); two fields with one flag are an error.
Booleans get ``--x/--no-x``. A ``dict[str, str]`` field is a repeatable ``--x KEY=VALUE`` option (items may also be
comma-separated); a list of numbers or strings is one comma-separated option (``--timeouts-s 60,300``); other
mappings are config-file only. Unset flags are None and leave the config file's
or the default value alone (a mapping given as flags is merged over the file's, key by key).
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
    path: tuple[str, ...]  # field path in the config, e.g. ("energy", "power_states", "boot_time_s")
    flag: str  # "--boot-time-s"
    param: str  # Python parameter name of the generated function
    kind: type  # str, int, float, bool, or dict (a str -> str mapping given as KEY=VALUE items)
    help: str
    metavar: str | None = None


def _unwrap(annotation: Any) -> tuple[Any, list[str] | None]:
    """(scalar type, Literal choices) of an annotation such as `float | None` or `Literal[...] | None`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else (None, None)
    if origin is Literal:
        return str, [str(a) for a in typing.get_args(annotation)]
    return annotation, None


def _is_scalar_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list and typing.get_args(annotation)[0] in (str, int, float)


def _is_text_mapping(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict and typing.get_args(annotation) == (str, str)


def config_options(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[ConfigOption]:
    out: list[ConfigOption] = []
    for name, info in model.model_fields.items():
        # The project's own keys (cli, cli_metavar: strings; cli_hidden: a flag) of the field's json_schema_extra.
        extra: dict[str, Any] = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        annotation, choices = _unwrap(info.annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += config_options(annotation, (*prefix, name))
            continue
        if _is_text_mapping(annotation):
            annotation = dict
        elif _is_scalar_list(annotation):
            annotation = list
        if extra.get("cli_hidden") or annotation not in (str, int, float, bool, datetime, dict, list):
            continue  # other mappings: config file only
        flag = extra.get("cli") or "--" + name.replace("_", "-")
        help_text = info.description or ""
        if choices and not help_text:
            help_text = " | ".join(choices)
        # A field with a default factory (a mapping, a nested model) or none at all shows no default.
        default = None if info.default_factory is not None or info.is_required() else info.default
        if info.default_factory is not None and annotation is list:
            default = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in info.default_factory())  # type: ignore[call-arg]
        if default is not None and not isinstance(default, BaseModel):
            help_text += f" [default: {default}]" if "[default" not in help_text else ""
        kind = str if annotation is datetime else annotation
        param = "opt_" + "_".join((*prefix, name))
        metavar = extra.get("cli_metavar")
        out.append(ConfigOption((*prefix, name), flag, param, kind, help_text.strip(), metavar))
    flags = [o.flag for o in out]
    dup = {f for f in flags if flags.count(f) > 1}
    if dup:
        raise ValueError(f"config fields map to the same CLI flag(s): {', '.join(sorted(dup))}")
    return out


def _parameter(opt: ConfigOption) -> inspect.Parameter:
    decl = f"{opt.flag}/--no-{opt.flag[2:]}" if opt.kind is bool else opt.flag
    # KEY=VALUE items and comma-separated lists, parsed by overrides_from
    kind = list[str] if opt.kind is dict else str if opt.kind is list else opt.kind
    # Escaped: rich would read "[default: x]" as a style tag and drop it.
    option = typer.Option(decl, help=escape(opt.help), show_default=False, metavar=opt.metavar)
    annotation = Annotated[kind | None, option]  # type: ignore[valid-type]  # built at run time for typer
    return inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def parse_key_values(items: list[str], flag: str, metavar: str | None = None) -> dict[str, str]:
    """``KEY=VALUE`` items (each may hold several, comma-separated) as a mapping; a malformed item or a key given
    twice is a usage error naming the flag."""
    from ..experiments.grid import parse_list

    expected = metavar or "KEY=VALUE"
    out: dict[str, str] = {}
    for item in (part for text in items for part in parse_list(text)):
        key, sep, value = (p.strip() for p in item.partition("="))
        if not (sep and key and value):
            raise typer.BadParameter(f"expected {expected}, got {item!r}", param_hint=f"'{flag}'")
        if key in out:
            raise typer.BadParameter(
                f"{key} is given twice ({key}={out[key]} and {key}={value})", param_hint=f"'{flag}'"
            )
        out[key] = value
    return out


def overrides_from(options: list[ConfigOption], values: dict[str, Any]) -> dict[str, Any]:
    """Nested override dict from the given (non-None) flag values."""
    out: dict[str, Any] = {}
    for opt in options:
        value = values.get(opt.param)
        if opt.kind is dict and value is not None:
            value = parse_key_values(value, opt.flag, opt.metavar) or None
        elif opt.kind is list and value is not None:
            value = [item.strip() for item in str(value).split(",") if item.strip()]
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
