"""The run settings' command-line options, made from their record (engine/settings.py).

A command decorated with `takes_settings` gets one option per setting, with the record's
flag, help, type and default, and receives what was typed as `**settings`; `given_settings`
turns those into `orc.run`'s keyword arguments (each through the record's `parse`), a
mistake said as a one-line error naming the option. Typer reads a command's options from
its signature, so the decorator writes the signature (`__signature__`) rather than the
command listing them again.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, TypeVar, cast, get_type_hints

import typer

from ..engine import SETTINGS, UNSET, RunArgs, RunSettings, default_of
from ..errors import OrchestratorError
from .app import fail

F = TypeVar("F", bound=Callable[..., Any])


def command_settings() -> list[str]:
    """The settings whose option the record makes (a flag, not written by hand)."""
    return [name for name, meta in SETTINGS.items() if meta.flag and not meta.by_hand]


@functools.cache
def _types() -> dict[str, Any]:
    return get_type_hints(RunSettings)


def option(name: str, help: str | None = None) -> inspect.Parameter:
    """The option of setting `name` as a keyword parameter Typer reads (`help` in place of
    the record's, for a command where the setting means a little more)."""
    meta = SETTINGS[name]
    annotation = meta.cli_type if meta.cli_type is not None else _types()[name]
    default = default_of(name) if meta.cli_default is UNSET else meta.cli_default
    info = typer.Option(meta.flag, help=help or meta.help, metavar=meta.metavar, envvar=meta.envvar)
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[annotation, info],
    )


def takes_settings(
    names: Iterable[str] | None = None,
    *,
    after: str,
    helps: Mapping[str, str] | None = None,
) -> Callable[[F], F]:
    """A command that takes the options of the settings `names` (default: every one with
    an option of its own), shown after its parameter `after`; it receives them through its
    `**settings`, as typed (read them with `given_settings`)."""
    chosen = list(names) if names is not None else command_settings()

    def decorate(command: F) -> F:
        own = inspect.signature(command, eval_str=True)
        made = [option(name, (helps or {}).get(name)) for name in chosen]
        parameters: list[inspect.Parameter] = []
        for parameter in own.parameters.values():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                continue
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            if parameter.name == after:
                parameters.extend(made)
        command.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        return command

    return decorate


def given_settings(typed: Mapping[str, Any]) -> RunArgs:
    """What was typed for the settings' options, as `orc.run`'s keyword arguments: each
    parsed as its record says (a mistake ends the command naming the option), an option
    not given left out so the setting's default applies."""
    given: dict[str, Any] = {}
    for name, value in typed.items():
        if value is None:
            continue
        parse = SETTINGS[name].parse
        if parse is not None:
            try:
                value = parse(value)
            except (ValueError, OrchestratorError) as exc:
                fail(str(exc))
        given[name] = value
    return cast(RunArgs, given)
