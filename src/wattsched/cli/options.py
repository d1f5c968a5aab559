"""CLI flags generated from the typed run config, so that a new setting is one edit (the config field).

Every leaf field of :class:`~wattsched.experiments.config.SimulationConfig` (its groups and nested models included)
becomes an option named after the field itself, not its path (``scheduler.round_s`` -> ``--round-s``,
``energy.power_states.boot_time_s`` -> ``--boot-time-s``), unless its metadata names another flag
(``{"cli": "--jobs"}``, ``workload.name`` -> ``--workload``); two fields with one flag are an error.
Booleans get ``--x/--no-x``. A ``dict[str, str]`` field is a repeatable ``--x KEY=VALUE`` option (items may also be
comma-separated); a list of numbers or strings is one comma-separated option (``--timeouts-s 60,300``); other
mappings are config-file only. Unset flags are None and leave the config file's
or the default value alone (a mapping given as flags is merged over the file's, key by key).

A command that takes only some of the settings (the live services, `wattsched serve ...`) names them with
:class:`Setting` (a field path or a flat key, and what the command says otherwise: its own default, a sentence on
the setting's live meaning, an older flag name kept as a hidden alias) and gets their options, with the same
names, types, checks and help, from :func:`with_setting_options`.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel
from rich.markup import escape

from .common import user_errors


@dataclass(frozen=True)
class ConfigOption:
    path: tuple[str, ...]  # field path in the config, e.g. ("energy", "power_states", "boot_time_s")
    flag: str  # "--boot-time-s"
    param: str  # Python parameter name of the generated function
    kind: type  # str, int, float, bool, or dict (a str -> str mapping given as KEY=VALUE items)
    help: str
    metavar: str | None = None
    description: str = ""  # the help without the "[default: ...]" appended to it (a command adds to it)
    default: Any = None  # a command's own default (setting_options): the value when the flag is not given
    aliases: tuple[str, ...] = ()  # older flag names of the setting: hidden, with the same meaning


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


def number_lists(model: type[BaseModel], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` with the items of every list-of-numbers flag of `model` (a flat config, an experiment's) as
    numbers; an item that is none is a :class:`WattschedError` naming the flag, with the field's first default
    items as the example (``--nodes: expected numbers such as 28,64, got '28,abc'``)."""
    from ..core.errors import WattschedError

    out = dict(overrides)
    for name, info in model.model_fields.items():
        annotation, _ = _unwrap(info.annotation)
        if name not in out or not _is_scalar_list(annotation) or typing.get_args(annotation)[0] is str:
            continue
        item = typing.get_args(annotation)[0]
        try:
            out[name] = [item(v) if isinstance(v, str) else v for v in out[name]]
        except ValueError:
            extra: dict[str, Any] = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            flag = extra.get("cli") or "--" + name.replace("_", "-")
            defaults = info.default_factory() if info.default_factory is not None else []  # type: ignore[call-arg]
            example = (
                ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in list(defaults)[:2]) or "1,2"
            )
            text = ",".join(map(str, out[name]))
            raise WattschedError(f"{flag}: expected numbers such as {example}, got {text!r}") from None
    return out


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
        description = help_text.strip()
        default = None if info.default_factory is not None or info.is_required() else info.default
        if info.default_factory is not None and annotation is list:
            default = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in info.default_factory())  # type: ignore[call-arg]
        if default is not None and not isinstance(default, BaseModel):
            help_text += f" [default: {default}]" if "[default" not in help_text else ""
        kind = str if annotation is datetime else annotation
        param = "opt_" + "_".join((*prefix, name))
        metavar = extra.get("cli_metavar")
        out.append(ConfigOption((*prefix, name), flag, param, kind, help_text.strip(), metavar, description))
    flags = [o.flag for o in out]
    dup = {f for f in flags if flags.count(f) > 1}
    if dup:
        raise ValueError(f"config fields map to the same CLI flag(s): {', '.join(sorted(dup))}")
    return out


def _parameter(opt: ConfigOption, panel: str | None = None, alias: str | None = None) -> inspect.Parameter:
    """The typer parameter of an option (under the help panel `panel`); with `alias`, the hidden parameter of
    that older name of it."""
    flag = alias or opt.flag
    decl = f"{flag}/--no-{flag[2:]}" if opt.kind is bool else flag
    # KEY=VALUE items and comma-separated lists, parsed by overrides_from
    kind = list[str] if opt.kind is dict else str if opt.kind is list else opt.kind
    # Escaped: rich would read "[default: x]" as a style tag and drop it.
    help_text = escape(opt.help if alias is None else f"old name of {opt.flag}")
    option = typer.Option(
        decl,
        help=help_text,
        show_default=False,
        metavar=opt.metavar,
        hidden=alias is not None,
        rich_help_panel=panel,
    )
    annotation = Annotated[kind | None, option]  # type: ignore[valid-type]  # built at run time for typer
    name = opt.param if alias is None else _alias_param(opt, alias)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def _alias_param(opt: ConfigOption, alias: str) -> str:
    return f"{opt.param}__{alias.lstrip('-').replace('-', '_')}"


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


# -- a command's chosen settings -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    """One run setting a command takes (:func:`setting_options`): `key` is its field path (``("scheduler",
    "queue")``) or its flat key (``"queue"``, ``"power_states.idle_timeout_s"``, ``"seed"``). `default`: the
    command's own default (``...``: the field's; None: the field's, with no default shown and the setting not
    set unless the flag is given: :func:`is_set`). `live`: a sentence added to the field's help where the command's
    meaning needs it. `aliases`: older flag names of the command, accepted (hidden) with the same meaning."""

    key: str | tuple[str, ...]
    default: Any = ...
    live: str = ""
    aliases: tuple[str, ...] = ()


def setting_path(model: type[BaseModel], key: str | tuple[str, ...]) -> tuple[str, ...]:
    """The field path of a setting given by its path or, for the run config's groups, its flat key (``queue`` ->
    ``("scheduler", "queue")``, ``power_states.idle_timeout_s`` -> ``("energy", "power_states",
    "idle_timeout_s")``); other dotted keys are paths (``seed`` -> ``("seed",)``)."""
    if isinstance(key, tuple):
        return key
    from ..experiments.config import FLAT_KEYS

    head, *rest = key.split(".")
    if head in FLAT_KEYS and FLAT_KEYS[head][0] in model.model_fields:
        return (*FLAT_KEYS[head], *rest)
    return (head, *rest)


def setting_options(model: type[BaseModel], settings: Sequence[Setting]) -> list[ConfigOption]:
    """The options of the chosen `settings` of `model`: each the very option :func:`config_options` generates
    for the field (flag, type, metavar, help), with the command's default, live sentence and aliases."""
    by_path = {o.path: o for o in config_options(model)}
    out: list[ConfigOption] = []
    for setting in settings:
        path = setting_path(model, setting.key)
        if path not in by_path:
            raise ValueError(f"{setting.key!r} is not a setting of {model.__name__} with a flag")
        opt = by_path[path]
        text = opt.description
        if setting.live:
            text += f". {setting.live}"
        if setting.default is ...:
            text += opt.help[len(opt.description) :]  # the field's own "[default: ...]", if shown
            default = None
        else:
            default = setting.default
            if default is not None:
                text += f" [default: {default}]"
        out.append(replace(opt, help=text, default=default, aliases=tuple(setting.aliases)))
    return out


def setting_overrides(options: list[ConfigOption], values: dict[str, Any]) -> dict[str, Any]:
    """The nested overrides of a command's settings (:func:`overrides_from`): a flag given by an alias counts as
    given by its name (both at once is a usage error), and one not given takes the command's own default."""
    values = dict(values)
    for opt in options:
        for alias in opt.aliases:
            value = values.get(_alias_param(opt, alias))
            if value is None:
                continue
            if values.get(opt.param) is not None:
                raise typer.BadParameter(
                    f"{alias} is the old name of {opt.flag}: give one of them", param_hint=f"'{opt.flag}'"
                )
            values[opt.param] = value
        if values.get(opt.param) is None and opt.default is not None:
            values[opt.param] = opt.default
    return overrides_from(options, values)


def is_set(config: BaseModel, path: tuple[str, ...]) -> bool:
    """Whether the setting at `path` of a validated `config` was given (a flag, or a command's own default), not
    left at its field's default."""
    node = config
    for key in path[:-1]:
        if key not in node.model_fields_set:
            return False
        node = getattr(node, key)
    return path[-1] in node.model_fields_set


RUN_SETTINGS_PANEL = "Run settings (as in wattsched simulate)"


def with_setting_options(
    model: type[BaseModel],
    settings: Sequence[Setting],
    resolve: Callable[[dict[str, Any]], Any],
    param: str = "run",
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator for a command function whose own options are written by hand and whose parameter `param` is
    its settings: the command typer registers takes those options plus one generated option (and its hidden
    aliases) per setting, and calls the function with `param` = ``resolve(nested overrides)`` (e.g. the run config,
    checked as ``simulate``'s flags are; a bad value is one error line). The command keeps `setting_options` and
    `run_settings` (parsed values -> what `param` gets) as attributes."""
    options = setting_options(model, settings)

    def run_settings(values: dict[str, Any]) -> Any:
        overrides = setting_overrides(options, values)
        with user_errors():
            return resolve(overrides)

    def decorate(func: Callable[..., None]) -> Callable[..., None]:
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values() if p.name != param]
        names = [p.name for p in own]

        def command(**kwargs: Any) -> None:
            func(**{k: kwargs[k] for k in names}, **{param: run_settings(kwargs)})

        generated = [_parameter(o, RUN_SETTINGS_PANEL) for o in options]
        generated += [_parameter(o, RUN_SETTINGS_PANEL, alias) for o in options for alias in o.aliases]
        command.__signature__ = inspect.Signature([*own, *generated])  # type: ignore[attr-defined]
        command.__doc__ = func.__doc__
        command.__name__ = func.__name__
        command.__qualname__ = func.__qualname__
        command.__module__ = func.__module__
        command.setting_options = options  # type: ignore[attr-defined]
        command.run_settings = run_settings  # type: ignore[attr-defined]
        return command

    return decorate
