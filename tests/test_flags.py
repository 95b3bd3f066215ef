"""Flags declared on dataclass fields (`bertfit.flags`): the parser is built from the fields, so
a flag's name, help, choices, parser and default are the field's, and a flag not given leaves
the dataclass's default. Parsing only."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from bertfit.flags import add_flags, flag, flags_of, given


@dataclasses.dataclass
class Options:
    max_batch: int = dataclasses.field(default=64, metadata=flag("most texts per call"))
    wait: float = dataclasses.field(
        default=0.005, metadata=flag("the wait, in ms", name="--wait-ms", scale=1000)
    )
    mode: str | None = dataclasses.field(
        default=None, metadata=flag("how (default: either)", choices=("a", "b"))
    )
    fast: bool = dataclasses.field(default=False, metadata=flag("go fast", switch=True))
    note: str = "not a flag"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_flags(parser, flags_of(Options))
    return parser


def test_a_flag_not_given_leaves_the_dataclass_default():
    args = _parser().parse_args([])
    assert given(args, flags_of(Options)) == {}
    assert Options(**given(args, flags_of(Options))) == Options()


def test_given_flags_are_parsed_by_the_fields_type_into_the_fields_unit():
    args = _parser().parse_args(["--max-batch", "8", "--wait-ms", "50", "--mode", "b", "--fast"])
    values = given(args, flags_of(Options))
    assert values == {"max_batch": 8, "wait": 0.05, "mode": "b", "fast": True}
    assert Options(**values).wait == 0.05


def test_the_help_quotes_the_fields_default_in_the_flags_unit():
    helps = {a.option_strings[0]: a.help for a in _parser()._actions if a.option_strings}
    assert helps["--max-batch"] == "most texts per call (default 64)"
    assert helps["--wait-ms"] == "the wait, in ms (default 5)"
    assert helps["--mode"] == "how (default: either)"  # says its own default
    assert helps["--fast"] == "go fast"
    assert "--note" not in helps


def test_a_value_outside_the_fields_choices_or_type_is_a_usage_error(capsys):
    for argv in (["--mode", "c"], ["--max-batch", "many"]):
        with pytest.raises(SystemExit) as exited:
            _parser().parse_args(argv)
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --mode: invalid choice: 'c'" in err
    assert "argument --max-batch: invalid int value: 'many'" in err


def test_a_field_whose_type_has_no_obvious_parser_must_name_one():
    @dataclasses.dataclass
    class Sizes:
        sizes: list[int] = dataclasses.field(default_factory=list, metadata=flag("lengths"))

    with pytest.raises(TypeError, match=r"Sizes\.sizes: .* needs Flag\.type"):
        flags_of(Sizes)
