"""Command-line flags declared where their values live: on the fields of the typed config
dataclasses (`RunConfig`'s sections, `ServeOptions`). The field owns the flag's name, help,
choices, parser and default; argparse is built from the fields, so a value has one owner.

    @dataclasses.dataclass
    class Options:
        max_batch: int = dataclasses.field(default=64, metadata=flag("most texts per call"))

    add_flags(parser, flags_of(Options))          # --max-batch N  (help: "... (default 64)")
    Options(**given(parser.parse_args(argv), flags_of(Options)))

A flag not given leaves no attribute (argparse's default is `SUPPRESS`): the dataclass's
default applies when the object is built, and a value from a file (`--config`) is overridden
only by a flag that was given. Light: nothing here loads TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

FLAG = "bertfit.flag"  # the key of a field's metadata that holds its `Flag`


@dataclasses.dataclass(frozen=True)
class Flag:
    """A field's command-line flag.

    Args:
        help: what the flag does. `{default}` in it is replaced by the field's default; a help
            that never mentions a default gets " (default X)" appended (not for None, False or
            an empty value).
        name: the flag, e.g. "--model"; default: "--" and the field's name with dashes.
        group: the section of `--help` it is listed in (None: the parser's own choice).
        type: parses the flag's text; default: from the field's annotation (int, float, str).
        choices: the values it accepts.
        metavar: the value's name in `--help`.
        switch: a flag without a value that sets True.
        scale: the flag's unit per the field's: 1000 for a flag in ms whose field is seconds.
        shown: formats the default for the help (default: `shown_value`).
        field: filled by `flags_of`: the field it sets (dotted with a `prefix`).
        default: filled by `flags_of`: the field's default, in the field's unit.
    """

    help: str
    name: str | None = None
    group: str | None = None
    type: Callable[[str], Any] | None = None
    choices: Sequence | None = None
    metavar: str | None = None
    switch: bool = False
    scale: float = 1
    shown: Callable[[Any], str] | None = None
    field: str = ""
    default: Any = None

    @property
    def dest(self) -> str:
        """The attribute argparse sets: "--max-seq-length" → "max_seq_length"."""
        return self.name[2:].replace("-", "_")

    def help_text(self) -> str:
        """The help with the field's default quoted (see `help` above)."""
        default = self.default if self.scale == 1 else self.default * self.scale
        shown = (self.shown or shown_value)(default)
        if "{default}" in self.help:
            return self.help.replace("{default}", shown)
        empty = isinstance(default, str | list | tuple | dict) and not default
        if "default" in self.help or default is None or default is False or empty:
            return self.help
        return f"{self.help} (default {shown})"

    def options(self) -> dict:
        """argparse's `add_argument` options, but the default (see the module's docstring)."""
        if self.switch:
            return {"action": "store_true", "help": self.help_text()}
        options = {"type": self.type, "choices": self.choices, "metavar": self.metavar}
        options = {key: value for key, value in options.items() if value is not None}
        return {**options, "help": self.help_text()}

    def value(self, given):
        """The field's value of what the flag parsed (in the field's unit)."""
        return given if self.scale == 1 else given / self.scale


def flag(help: str, **spec) -> dict:
    """A dataclass field's metadata declaring its flag: `field(default=..., metadata=flag(...))`;
    `spec` takes `Flag`'s other arguments."""
    return {FLAG: Flag(help, **spec)}


def flags_of(cls, prefix: str = "") -> list[Flag]:
    """The flags declared on the fields of dataclass `cls`, in field order, each with its name,
    parser, field (`prefix` + its name) and default filled in."""
    hints = typing.get_type_hints(cls)
    flags = []
    for field in dataclasses.fields(cls):
        spec = field.metadata.get(FLAG)
        if spec is None:
            continue
        default = field.default
        if default is dataclasses.MISSING:
            default = field.default_factory()
        parse = spec.type
        if parse is None and not spec.switch and spec.choices is None:
            parse = _parser_of(hints[field.name], cls.__name__, field.name)
        flags.append(
            dataclasses.replace(
                spec,
                name=flag_name(field),
                type=parse,
                field=prefix + field.name,
                default=default,
            )
        )
    return flags


def flag_name(field: dataclasses.Field) -> str:
    """The flag of a dataclass field: its `Flag`'s name, or "--" and its name with dashes."""
    spec = field.metadata.get(FLAG)
    return (spec and spec.name) or "--" + field.name.replace("_", "-")


def add_flags(parser, flags: Sequence[Flag], groups: dict | None = None, swept=None) -> None:
    """Adds `flags` to `parser` (an argparse parser or group): each into `groups[flag.group]`
    when `groups` is given. `swept(name, options)` may replace a flag's options (`bertfit
    tune`'s comma-separated values)."""
    for spec in flags:
        options = spec.options()
        if swept is not None:
            options = swept(spec.name, options)
        target = groups[spec.group] if groups is not None else parser
        target.add_argument(spec.name, default=argparse.SUPPRESS, **options)


def given(args: argparse.Namespace, flags: Sequence[Flag]) -> dict:
    """The flags given on the command line: field → value, in the field's unit."""
    values = vars(args)
    return {spec.field: spec.value(values[spec.dest]) for spec in flags if spec.dest in values}


def shown_value(value) -> str:
    """A default as `--help` quotes it: 0.005 → "0.005", 1.0 → "1", [32, 64] → "32,64"."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _parser_of(hint, owner: str, name: str) -> Callable[[str], Any] | None:
    """The parser of a field annotated int, float or str (optional or not); any other type
    names its own `Flag.type`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else hint
    if hint in (int, float):
        return hint
    if hint is str:
        return None  # argparse's own: the text
    raise TypeError(f"{owner}.{name}: a flag for a field of type {hint} needs Flag.type")


# ---- parsers of flag values (argparse types) ----


def parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_bool_or_auto(text: str) -> bool | None:
    return None if text.lower() == "auto" else parse_bool(text)


def parse_workers(text: str) -> list[str]:
    workers = [w.strip() for w in text.split(",") if w.strip()]
    if not workers or any(":" not in w for w in workers):
        raise argparse.ArgumentTypeError(
            f"--workers takes comma-separated host:port pairs, e.g. 10.0.0.1:2222,10.0.0.2:2222; "
            f"got {text!r}"
        )
    return workers
