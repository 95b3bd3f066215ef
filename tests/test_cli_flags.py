"""The CLI's flags as a user meets them: `check` takes a pasted `train` command whole, every flag
says what it does (and its default), `train --help` is in sections, `--version` answers. All
parsing only: nothing here loads TensorFlow or trains."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata

import pytest

from bertfit.cli import build_parser, main
from bertfit.config import DEFAULT_EPOCHS, SECTIONS, DataConfig, RunConfig, flag_of
from bertfit.flags import FLAG, shown_value
from bertfit.run_flags import RUN_FLAG_GROUPS, RUN_FLAGS, run_config_from_args


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


def _a_value(action: argparse.Action) -> list[str]:
    """Arguments that give `action` a valid value (nothing for a switch)."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    samples = {"int": "2", "float": "0.5", "parse_bool": "true", "parse_bool_or_auto": "auto"}
    samples |= {"parse_buckets": "16,32", "parse_workers": "localhost:2222,localhost:2223"}
    return [samples.get(getattr(action.type, "__name__", ""), "x.csv")]


@pytest.mark.parametrize("command", ["check", "doctor"])
def test_check_and_doctor_accept_every_flag_train_takes(command):
    pasted = []
    for action in _commands()["train"]._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            pasted += [action.option_strings[0], *_a_value(action)]
    train = vars(build_parser().parse_args(["train", *pasted]))
    other = vars(build_parser().parse_args([command, *pasted]))
    shared = {
        k: v for k, v in train.items() if k not in ("handler", "preflight", "func", "command")
    }
    assert {k: other[k] for k in shared} == shared


def test_every_argument_of_every_command_says_what_it_does():
    silent = [
        f"{name} {action.option_strings or action.dest}"
        for name, command in _commands().items()
        for action in command._actions
        if not isinstance(action, argparse._HelpAction)
        and (not action.help or action.help == argparse.SUPPRESS)
    ]
    assert silent == []


def test_train_help_is_in_sections_and_quotes_the_config_defaults():
    train = _commands()["train"]
    sections = {
        group.title: [a.option_strings[0] for a in group._group_actions]
        for group in train._action_groups
    }
    for title in RUN_FLAG_GROUPS:
        assert sections[title] == [name for name, f in RUN_FLAGS.items() if f.group == title]
    assert {"--resume", "--json", "--quiet", "--output-dir"} <= set(sections["run and output"])
    assert sections["options"] == ["-h"]  # nothing left in the flat list
    assert sum(len(sections[title]) for title in RUN_FLAG_GROUPS) == len(RUN_FLAGS)
    helps = {a.option_strings[0]: a.help for a in train._actions if a.option_strings}
    defaults = RunConfig()
    assert helps["--weight-decay"].endswith(f"(default {defaults.train.weight_decay})")
    assert f"(default {DEFAULT_EPOCHS}, more for a small training set" in helps["--epochs"]
    assert helps["--learning-rate"].endswith(f"(default {defaults.train.learning_rate})")
    assert helps["--max-seq-length"].endswith(f"(default {defaults.model.max_seq_length})")


def test_every_config_field_is_a_flag_with_the_fields_help_choices_and_default():
    """The config dataclasses own their flags: each field's declared help and choices are the
    parser's, a quoted default is the field's, and a flag left out leaves the field's default."""
    actions = {a.option_strings[0]: a for a in _commands()["train"]._actions if a.option_strings}
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            declared = field.metadata[FLAG]
            action = actions[flag_of(f"{section}.{field.name}")]
            assert action.help.startswith(declared.help)
            if action.help != declared.help:
                default = shown_value(getattr(cls(), field.name))
                assert action.help == f"{declared.help} (default {default})"
            assert action.choices == declared.choices
            assert action.default is argparse.SUPPRESS  # so --config's values stay
    args = build_parser().parse_args(["train", "--train", "t.csv"])
    assert run_config_from_args(args) == RunConfig(data=DataConfig(train="t.csv"))


def test_version_names_the_installed_distribution(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"bertfit {importlib.metadata.version('bertfit')}\n"


def test_train_and_tune_print_a_few_lines_for_people():
    """Without --json: the headline, where the run is; the rest is in the run's files."""
    from bertfit.cli import train_lines, tune_lines
    from bertfit.runs.records import EpochRecord, RunSummary
    from bertfit.sweeps.results import RunResult, SweepResults, TrialResult

    summary = RunSummary("finished", "regression", [], {}, {}, {}, run_dir="runs/r")
    summary.epochs = [EpochRecord(1, 0.25, 64, 100.0, 0.6)]
    assert train_lines(summary, None) == [
        "no --eval: nothing evaluated; train loss 0.2500",
        "run directory: runs/r (every metric: metrics.json)",
    ]
    summary.final, summary.best = {"rmse": 0.5, "pearson": 0.75, "mae": 0.4}, {"rmse": 0.45}
    assert train_lines(summary, "runs/r/report.html")[0] == (
        "final evaluation: rmse 0.5000, pearson 0.7500 (best rmse 0.4500)"
    )

    summary.task, summary.best = "multi-label", None
    summary.final = {"micro_f1": 0.8, "macro_f1": 0.85, "labels_without_support": ["acting"]}
    assert train_lines(summary, None)[:2] == [
        "final evaluation: micro_f1 0.8000, macro_f1 0.8500",
        "no eval rows of 'acting': its F1 is not measured, and macro_f1 averages the others",
    ]

    runs = [RunResult(42, None, "s/runs/t1/seed42", "finished", 0.8)]
    runs.append(RunResult(43, None, "s/runs/t1/seed43", "finished", 0.9))
    results = SweepResults("accuracy", [TrialResult("t1-lr0.001", {"lr": 1e-3}, runs)])
    assert tune_lines(results, "s") == [
        "chosen trial: t1-lr0.001: accuracy 0.8500 ± 0.0707 over 2 run(s)",
        "chosen run: s/runs/t1/seed43",
        "sweep directory: s (results.json; chosen.yaml: its config)",
    ]


def _required(command: argparse.ArgumentParser) -> list[str]:
    """Arguments that satisfy `command`'s required ones, so that parsing reaches the rest."""
    argv = []
    for action in command._actions:
        if not action.option_strings:
            argv.append("x")
        elif action.required:
            argv += [action.option_strings[0], *_a_value(action)]
    for group in command._mutually_exclusive_groups:
        if group.required:
            action = group._group_actions[0]
            argv += [action.option_strings[0], *_a_value(action)]
    return argv


def _mistyped(flag: str) -> str:
    """The flag with two of its letters swapped, as fingers do: --epochs -> --epcohs."""
    i = len(flag) // 2
    return flag[:i] + flag[i + 1] + flag[i] + flag[i + 2 :]


@pytest.mark.parametrize("name", sorted(_commands()))
def test_a_mistyped_flag_is_one_line_naming_the_closest_flags(name, capsys):
    command = _commands()[name]
    flags = [s for a in command._actions for s in a.option_strings if s.startswith("--")]
    flag = max((f for f in flags if f != "--help"), key=len)
    with pytest.raises(SystemExit) as exited:
        main([name, *_required(command), _mistyped(flag), "3"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bertfit {name}: error: "), err
    assert f"unrecognized arguments: {_mistyped(flag)} 3" in err
    assert "did you mean" in err and flag in err.partition("did you mean")[2]


def test_the_closest_flags_and_commands_are_suggested(capsys):
    for argv, says in [
        (["train", "--train", "t.csv", "--epcohs", "3"], "--epcohs 3 (did you mean --epochs?)"),
        (["train", "--lerning-rate=1"], "did you mean --learning-rate?"),
        (["trian"], "invalid choice: 'trian' (choose from "),
        (["trian"], "; did you mean train?"),
        (["train", "--pooling", "maen"], "did you mean mean?"),
        (["train", "--xyz"], "unrecognized arguments: --xyz; bertfit train --help lists"),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
