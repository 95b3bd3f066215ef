"""The CLI's start-up: arguments are parsed before TensorFlow loads, so `--help` and usage
errors answer at once; once loaded, TensorFlow's C++ notes stay off the terminal, those logged
mid-run included (`bertfit.tf_startup`). Each case runs in a fresh process: what matters is
what a process imports and what its TensorFlow reads when it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_PARSE_ONLY = """
import json, sys
from bertfit.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
heavy = [m for m in ("tensorflow", "keras", "tensorflow_text") if m in sys.modules]
print(json.dumps({"code": code, "loaded": heavy}))
"""


def _parse_only(*argv: str) -> tuple[dict, str]:
    """`bertfit argv...` in a new process: its exit code, the heavy modules it loaded, and its
    standard output and error."""
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_ONLY, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert last.startswith("{"), done.stdout + done.stderr
    return json.loads(last), done.stdout + done.stderr


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--help"], "Fine-tune BERT-family encoders"),
        (["train", "--help"], "--buckets"),
        (["check", "--help"], "--target"),
        (["--version"], "bertfit 0."),
    ],
)
def test_help_loads_no_tensorflow(argv, says):
    result, output = _parse_only(*argv)
    assert result == {"code": 0, "loaded": []}, output
    assert says in output


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "the following arguments are required: command"),
        (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["check", "--train", "t.csv", "--epoch", "x"], "argument --epochs: invalid int value"),
        (["tune", "--output-dir", "s", "--lerning-rate", "1"], "unrecognized arguments"),
        (["evaluate", "--data", "x.csv"], "the following arguments are required: --run"),
        (["train", "--pooling", "max"], "argument --pooling: invalid choice: 'max'"),
        (["train", "--buckets", "32,x"], "--buckets takes comma-separated lengths"),
        (["export", "--run", "r", "out", "--version", "0"], "expected a whole number from 1"),
        (["serve", "--run", "r", "--max-batch", "0"], "--max-batch must be at least 1, got 0"),
        (["convert", "m", "m", "--to", "hf"], "DST m overlaps the input m"),  # a preflight
        (["predict", "--run", "r", "--data", "-", "--backend", "jax"], "r is not one"),
        # the teacher, read before the student's --backend is chosen
        (["distill", "--teacher", "none", "--output-dir", "s"], "--teacher none holds no run"),
        # data files, read before TensorFlow loads
        (["train", "--train", "missing.csv"], "missing.csv: file not found"),
        (["train", "--train", "README.md"], "README.md: cannot tell the format"),
        (["evaluate", "--run", "r", "--data", "missing.csv"], "missing.csv: file not found"),
        (["predict", "--run", "r", "--data", "missing.jsonl"], "missing.jsonl: file not found"),
        (["prepare", "missing.csv", "out"], "missing.csv: file not found"),
    ],
)
def test_usage_errors_exit_2_without_loading_tensorflow(argv, says):
    result, output = _parse_only(*argv)
    assert result == {"code": 2, "loaded": []}, output
    assert says in output
    assert "Traceback" not in output


def test_a_bad_row_is_said_before_tensorflow_loads(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("text,label\ngood,pos\n,neg\n")
    sweep = ["--output-dir", str(tmp_path / "sweep"), "--folds", "2"]
    for argv in (
        ["train", "--train", str(data)],
        ["train", "--train", str(data), "--streaming"],  # the first rows, as it streams them
        ["train", "--train", str(tmp_path / "*.csv")],  # a glob
        ["tune", "--train", str(data), *sweep],
        ["audit", "--train", str(data), *sweep],
        ["prepare", str(data), str(tmp_path / "prepared")],
    ):
        result, output = _parse_only(*argv)
        assert result == {"code": 2, "loaded": []}, output
        assert f"{data}:3: the text (column 'text') is empty" in output, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.csv"]


# TensorFlow's own function for the note (tensorflow/core/util/util.cc), called directly: this
# machine may have AVX-512, where no op ever logs it.
_ONEDNN_NOTE = """
import ctypes, os, sys
if sys.argv[1] == "cli":
    from bertfit.tf_startup import start_tensorflow
    start_tensorflow()
elif sys.argv[1] == "api":  # a Python program that uses bertfit: its API loads TensorFlow
    import bertfit
    bertfit.load_encoder
import tensorflow as tf
framework = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2"))
try:
    warn = framework._ZN10tensorflow26DataTypeUnsupportedWarningERKNS_8DataTypeE
except AttributeError:
    print("no such function")
    sys.exit()
sys.stderr.write("probe\\n")
sys.stderr.flush()
warn(ctypes.byref(ctypes.c_int(tf.int64.as_datatype_enum)))
print("called")
"""


def _onednn_note_printed(how: str, **environment: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",)}
    env.pop("BERTFIT_VERBOSE_TF", None)
    done = subprocess.run(
        [sys.executable, "-c", _ONEDNN_NOTE, how],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env | environment,
    )
    # TensorFlow is pinned (2.21), so the function must be there: its absence means this probe
    # no longer tests anything, which must fail rather than pass silently.
    assert done.stdout.strip() == "called", (
        "tensorflow::DataTypeUnsupportedWarning could not be called: " + done.stdout + done.stderr
    )
    after_probe = done.stderr.split("probe\n", 1)[1]
    return "oneDNN supports DT_INT64 only on platforms with AVX-512" in after_probe


def test_onednn_int64_note_logged_mid_run_stays_off_the_terminal():
    # What a CPU without AVX-512 logs at a training run's first int64 op, after start-up.
    assert not _onednn_note_printed("cli")
    # The control: the same call prints it where TensorFlow keeps its own threshold (that of a
    # process that did not start TensorFlow so: BERTFIT_VERBOSE_TF leaves it unset).
    assert _onednn_note_printed("cli", BERTFIT_VERBOSE_TF="1")


def test_tensorflow_loaded_by_the_python_api_keeps_its_cpp_notes_off_stderr():
    # `import bertfit` sets the threshold TensorFlow reads when it loads (a user's own wins).
    assert not _onednn_note_printed("api")
    assert _onednn_note_printed("api", BERTFIT_VERBOSE_TF="1")
    assert _onednn_note_printed("api", TF_CPP_MIN_LOG_LEVEL="0")
