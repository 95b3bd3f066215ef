"""`bertfit tune`'s flags and the sweep they make: the grid, the seeds, a random draw, the runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bertfit.cli import build_parser
from bertfit.sweeps.flags import sweep_from_args
from bertfit.sweeps.spec import SweepSpec

ROOT = Path(__file__).resolve().parents[2]


def _parse(*flags: str):
    return build_parser().parse_args(["tune", "--train", "t.csv", "--output-dir", "s", *flags])


def test_swept_flags_with_several_values_make_the_grid_and_the_rest_pass_through():
    args = _parse(
        "--learning-rate", "2e-5,5e-5,1e-4", "--epochs", "3,5", "--seeds", "3",
        "--batch-size", "16", "--eval", "dev.csv", "--seed", "7", "--dropout", "0.2",
    )  # fmt: skip
    base, spec = sweep_from_args(args)
    assert spec.grid == {"train.learning_rate": [2e-5, 5e-5, 1e-4], "train.epochs": [3, 5]}
    assert spec.seeds == [7, 8, 9]
    assert (base.train.batch_size, base.model.dropout, base.data.eval) == (16, 0.2, "dev.csv")
    trials = spec.trial_list()
    assert [t.name for t in trials] == [
        "t1-lr2e-05-ep3", "t2-lr2e-05-ep5", "t3-lr5e-05-ep3",
        "t4-lr5e-05-ep5", "t5-lr0.0001-ep3", "t6-lr0.0001-ep5",
    ]  # fmt: skip
    runs = spec.runs(base, Path("s"))
    assert len(runs) == 18
    assert {(r.config.train.learning_rate, r.config.train.epochs) for r in runs} == {
        (lr, ep) for lr in (2e-5, 5e-5, 1e-4) for ep in (3, 5)
    }
    assert runs[1].config.train.seed == 8 and runs[1].path == Path("s/runs/t1-lr2e-05-ep3/seed8")
    assert all(r.config.train.batch_size == 16 and r.config.model.dropout == 0.2 for r in runs)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning-rate", "1e-4,1e-4"], "repeated"),
        (["--learning-rate", "1e-4,"], "comma-separated"),
        (["--pooling", "cls,max"], "one of cls, mean"),
        (["--seeds", "0"], "at least 1"),
    ],
)
def test_bad_sweep_values_are_usage_errors(flags, message, capsys):
    with pytest.raises(SystemExit):
        _parse(*flags)
    assert message in capsys.readouterr().err


def test_a_random_draw_is_a_seeded_subset_of_the_grid_in_grid_order():
    grid = {"train.learning_rate": [1e-5, 2e-5, 3e-5, 5e-5], "train.epochs": [2, 3, 4]}
    drawn = SweepSpec(grid, [0], trials=5, search_seed=1).trial_list()
    every = {tuple(t.params.values()) for t in SweepSpec(grid, [0]).trial_list()}
    assert len(drawn) == 5 and {tuple(t.params.values()) for t in drawn} <= every
    assert drawn == SweepSpec(grid, [0], trials=5, search_seed=1).trial_list()
    assert drawn != SweepSpec(grid, [0], trials=5, search_seed=2).trial_list()
    assert len(SweepSpec(grid, [0], trials=50).trial_list()) == 12  # a budget over the grid


def test_tune_help_and_its_usage_errors_load_no_tensorflow():
    code = (
        "import sys\n"
        "from bertfit.cli import main\n"
        "for argv in (['tune', '--help'], ['tune', '--output-dir', 's', '--epochs', '3,x']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        print('exit', e.code)\n"
        "print([m for m in ('tensorflow', 'keras') if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.stdout.split("\n")[-4:] == ["exit 0", "exit 2", "[]", ""], done.stderr
    assert "--folds" in done.stdout and "invalid epochs value: '3,x'" in done.stderr
