"""Every command's output path is checked in one place (`bertfit.paths`) before any work, and
written whole: devices, FIFOs, the input and a run's own files are refused; `-` is stdout."""

from __future__ import annotations

import csv
import errno
import io
import json
import os

import pytest

from bertfit import atomic
from bertfit.cli import build_parser, main
from bertfit.errors import BertfitError, ConfigError
from bertfit.inference.predictions_file import format_predictions, write_predictions
from bertfit.paths import check_output_dir, check_output_file, write_output
from tests.tiny import train_args


def test_predictions_csv_has_the_columns_of_each_task():
    single = [{"label": "pos", "probabilities": {"neg": 0.1, "pos": 0.9}}]
    multi = [
        {"labels": ["fun", "pos"], "probabilities": {"fun": 0.7, "pos": 0.8}},
        {
            "labels": [],
            "probabilities": {"fun": 0.1, "pos": 0.2},
        },
    ]
    regression = [{"value": 3.25}, {"value": -1.0}]
    rows = list(csv.DictReader(io.StringIO(format_predictions(single, True))))
    assert rows == [{"label": "pos", "probabilities": '{"neg": 0.1, "pos": 0.9}'}]
    rows = list(csv.DictReader(io.StringIO(format_predictions(multi, True))))
    assert [json.loads(r["labels"]) for r in rows] == [["fun", "pos"], []]
    rows = list(csv.DictReader(io.StringIO(format_predictions(regression, True))))
    assert [float(r["value"]) for r in rows] == [3.25, -1.0]


def test_dash_means_standard_output(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    check_output_file("-", "--output")
    write_predictions([{"value": 1.5}], "-")
    write_output("-", "<html></html>")
    assert capsys.readouterr().out == '{"value": 1.5}\n<html></html>'
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("target", ["/dev/null", "fifo"])
def test_devices_and_fifos_are_refused(tmp_path, target):
    if target == "fifo":
        target = tmp_path / "fifo"
        os.mkfifo(target)
    with pytest.raises(ConfigError, match="not a regular file"):
        check_output_file(target, "--output")
    with pytest.raises(ConfigError, match="not a folder"):
        check_output_dir(target, "OUT")


def test_the_input_and_the_runs_own_files_are_refused(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("text\nx\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("")
    with pytest.raises(ConfigError, match="input file"):
        check_output_file(str(data), "--output", inputs=[str(data)])
    with pytest.raises(ConfigError, match="inside the run directory"):
        check_output_file(run / "config.yaml", "--output", run_dir=run)
    check_output_file(run / "report.html", "--output", run_dir=run, allowed_in_run=["report.html"])
    with pytest.raises(ConfigError, match="inside the run directory"):
        check_output_dir(run / "export", "OUT", run_dir=run)
    with pytest.raises(ConfigError, match="overlaps the input"):
        check_output_dir(tmp_path, "DST", inputs=[run])


def _finished_run(path):
    """A folder marked as a run directory, as `bertfit train` writes one before its first step."""
    (path / "encoder").mkdir(parents=True)
    for name in ("config.yaml", "labels.json", "metrics.json"):
        (path / name).write_text("{}")
    (path / "report.html").write_text("the run's own report")
    return path


def test_the_marks_of_a_run_and_a_sweep_directory_are_theirs():
    from bertfit.paths import OWNED_DIRECTORIES
    from bertfit.runs.run_dir import RunDir
    from bertfit.sweeps.sweep_dir import SweepDir

    run, sweep = RunDir("r"), SweepDir("s")
    written = [run.config_file, run.labels_file, run.encoder_dir]
    assert OWNED_DIRECTORIES["the run directory"] == tuple(p.name for p in written)
    written = [sweep.spec_file, sweep.runs_dir]
    assert OWNED_DIRECTORIES["the sweep directory"] == tuple(p.name for p in written)


def test_no_command_writes_into_another_run_or_a_sweep(tmp_path, capsys):
    run, other = _finished_run(tmp_path / "run"), _finished_run(tmp_path / "other")
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    data = tmp_path / "data.csv"  # a training file bertfit reads: the output is what is refused
    data.write_text("text,label\nx,a\ny,b\n")
    cases = {
        "report over another run's report": (
            ["report", str(run), "--output", str(other / "report.html")],
            "is inside the run directory",
        ),
        "report into a sweep": (
            ["report", str(run), "--output", str(sweep / "report.html")],
            "is inside the sweep directory",
        ),
        "predictions into another run": (
            ["predict", "--run", str(run), "--data", str(data), "--output", str(other / "p.csv")],
            "is inside the run directory",
        ),
        "an export into another run": (
            ["export", "--run", str(run), str(other)],
            "is the run directory",
        ),
        "an export inside a sweep's run": (
            ["export", "--run", str(run), str(sweep / "runs" / "t1")],
            "is inside the sweep directory",
        ),
        "a conversion into a run": (
            ["convert", str(data), str(other / "x"), "--to", "hf"],
            "is inside the run directory",
        ),
        "a new run inside a run": (
            train_args(tmp_path / "model", data, run / "sub", quiet=True),
            "is inside the run directory",
        ),
        "a new sweep inside a sweep": (
            ["audit", "--train", str(data), "--folds", "2", "--output-dir", str(sweep / "s")],
            "is inside the sweep directory",
        ),
        "the demo inside a run": (
            ["demo", "--output-dir", str(run / "demo")],
            "is inside the run directory",
        ),
        "prepared shards into a sweep": (
            ["prepare", str(data), str(sweep / "shards")],
            "is inside the sweep directory",
        ),
    }
    for case, (argv, words) in cases.items():
        assert main(argv) == 2, case
        err = capsys.readouterr().err.strip()
        assert words in err and "Choose a path outside it" in err, (case, err)
        assert len(err.splitlines()) == 1, case
    assert (other / "report.html").read_text() == "the run's own report"
    assert sorted(p.name for p in other.iterdir()) == sorted(p.name for p in run.iterdir())
    assert sorted(p.name for p in sweep.iterdir()) == ["runs", "sweep.json"]
    check_output_file(run / "report.html", "--output", run_dir=run, allowed_in_run=["report.html"])


def test_a_full_disk_is_a_clean_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(BertfitError, match="No space left on device"):
        atomic.write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


@pytest.mark.parametrize("version", ["0", "-1", str(10**23), "x"])
def test_export_versions_are_positive_int64(version, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "--run", "r", "out", "--version", version])
    assert "--version" in capsys.readouterr().err


def test_predict_reads_any_format_from_standard_input():
    args = build_parser().parse_args(["predict", "--run", "r", "--data", "-", "--format", "jsonl"])
    assert args.format == "jsonl"
