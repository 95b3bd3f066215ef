"""Every user mistake of issue 13 ends in one line on stderr and exit code 2: no traceback, no
TensorFlow log line, no half-written run directory. One subprocess runs all of them
(tests/cli_errors.py), capturing file descriptors, so C++ output would be caught too."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results(trainable_hf_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("cli-errors")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CPP_MIN_LOG_LEVEL", "BERTFIT_VERBOSE_TF")
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_errors", str(work), str(trainable_hf_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return work, json.loads(done.stdout.strip().splitlines()[-1])


EXPECTED = {  # case -> words its one line must hold
    "length past the position table": "max_position_embeddings 64",
    "negative learning rate": "learning_rate (--learning-rate) must be",
    "huge learning rate": "no larger than 1.0",
    "overflowing learning rate": "no larger than 1.0",
    "seed past 32 bits": "seed (--seed) must be between 0 and 4294967295",
    "100000 cpu replicas": "at least 1 and at most 64",
    "mirrored on one cpu": "--strategy mirrored copies the model",
    "float16 on a cpu": "mixed_fp16 needs a GPU",
    "demo with zero epochs": "--epochs must be at least 1",
    "check on mirrored on one cpu": "--strategy mirrored copies the model",
    "check on float16 on a cpu": "float16 on a CPU",
    "train on /dev/zero": "/dev/zero: is a device or socket, not a regular file",
    "train on a fifo": "is a FIFO (named pipe), not a regular file",
    "yaml config that is a list": "this file holds a list",
    "deeply nested yaml config": "nested too deeply",
    "binary yaml config": "not UTF-8 text",
    "broken yaml config": "cannot read the run config",
    "zero cpu replicas": "--cpu-replicas",
    "negative cpu replicas": "--cpu-replicas",
    "yaml string where a number is due": "max_seq_length",
    "lone surrogate in a text": "surrogate_text.jsonl:1",
    "lone surrogate in a label": "surrogate_label.jsonl:1",
    "5000-digit label (csv)": "huge_int.csv: every row has the label '99999",  # a class name
    "5000-digit label (jsonl)": "huge_int.jsonl:1",
    "deeply nested json": "nested.jsonl:1",
    "output dir is a file": "a_file",
    "output dir cannot be created": "/proc/bertfit-run",
    "tpu without a tpu": "No TPU",
    "zip bomb": "decompression bomb",
    "utf-32 data": "UTF-32",
    "invisible text": "invisible.jsonl:1",
    "check on a length past the position table": "max_position_embeddings",
    "predict over its own input": "--output",
    "predict into /dev/null": "is a device, not a regular file",
    "predict into a fifo": "is a FIFO",
    "predict into a missing folder": "does not exist",
    "predict into a directory": "is a directory",
    "predict into a read-only file system": "cannot create files in /proc",
    "predict into the run": "inside the run directory",
    "report over the run's config": "inside the run directory",
    "report into /dev/null": "is a device",
    "report into a missing folder": "does not exist",
    "report on a truncated metrics.json": "cannot be read as the run's metrics",
    "report on a list-shaped metrics.json": "not a bertfit metrics file",
    "report on a latin-1 metrics.json": "cannot be read as the run's metrics",
    "export into a file": "not a folder",
    "export into a fifo": "is a FIFO",
    "export into the run": "inside the run directory",
    "export into a read-only file system": "cannot create files in /proc",
    "convert into a file": "not a folder",
    "convert into its source": "overlaps the input",
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_a_mistake_is_one_line_and_exit_code_2(results, case):
    work, got = results
    result = got[case]
    lines = result["stderr"].strip().splitlines()
    if case.startswith("check "):  # check prints its report, then exits 2 on the error
        assert result["code"] == 2, result
        assert EXPECTED[case] in result["stdout"] + result["stderr"]
        assert "Traceback" not in result["stderr"]
        return
    assert result["code"] == 2, result
    assert len(lines) == 1, result["stderr"]
    assert lines[0].startswith("bertfit ") and ": error: " in lines[0]
    assert EXPECTED[case] in lines[0], lines[0]
    assert len(lines[0]) < 800  # a long input is not echoed whole
    assert "Traceback" not in result["stderr"] + result["stdout"]


def test_no_mistake_leaves_a_run_directory_or_a_half_written_file(results):
    work, _ = results
    assert not [p.name for p in work.iterdir() if p.name.startswith("r")]
    assert (work / "a_file").read_text() == "not a directory\n"
    assert (work / "good.csv").read_text().startswith("text,label\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert stat.S_ISFIFO(os.stat(work / "fifo").st_mode)
    assert (work / "fake_run" / "config.yaml").read_text() == "model:\n  name: tiny\n"
    assert sorted(p.name for p in (work / "fake_run").iterdir()) == ["config.yaml", "metrics.json"]
    assert not (work / "missing").exists()
    cache = work / "cache" / "archives"
    assert not cache.exists() or not any(cache.iterdir())


def test_help_and_a_tiny_check_print_no_tensorflow_start_up_lines(trainable_hf_dir, tmp_path):
    from tests.tiny import sentiment_rows, train_args, write_csv

    train = write_csv(tmp_path / "train.csv", sentiment_rows(16))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CPP_MIN_LOG_LEVEL", "BERTFIT_VERBOSE_TF")
    }
    bertfit = [sys.executable, "-m", "bertfit.cli"]
    for argv in (
        ["--help"],
        train_args(
            trainable_hf_dir,
            train,
            command="check",
            max_seq_length=32,
            epochs=None,
            quiet=None,
            no_compile=True,
        ),
    ):
        done = subprocess.run(
            [*bertfit, *argv], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        for marker in ("I0000", "E0000", "W0000", "cuInit", "absl::InitializeLog", "oneDNN"):
            assert marker not in done.stderr, done.stderr
