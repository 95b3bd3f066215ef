"""Which TensorFlow is installed, and what a user is told when it cannot run (issue 43)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertfit.tf_build import (
    INSTALL,
    Installed,
    InstallError,
    check_installed,
    explain_fatal,
    install_commands,
)

ROOT = Path(__file__).resolve().parents[1]
# What tensorflow-tpu 2.20.0 printed here with libtpu 0.0.46, before it aborted.
LIBTPU_ABORT = (
    "2026-11-25 23:29:56.731590: F external/local_xla/xla/stream_executor/tpu/"
    "tpu_library_init_fns.inc:12] ConfigureDistributedTpuOp_DoWork not available in this library."
)


def test_one_build_of_tensorflow_is_fine():
    assert Installed({"tensorflow": "2.21.0"}, None).problems() is None
    assert Installed({"tensorflow-tpu": "2.20.0"}, "0.0.21").problems() is None


def test_no_tensorflow_says_what_to_install_for_each_accelerator():
    problem = Installed({}, None).problems()
    for accelerator in INSTALL:
        assert f"{accelerator}: {install_commands(accelerator)}" in problem


def test_two_builds_in_one_folder_are_named_with_the_way_out():
    problem = Installed({"tensorflow": "2.21.0", "tensorflow-tpu": "2.20.0"}, "0.0.21").problems()
    assert "tensorflow 2.21.0, tensorflow-tpu 2.20.0" in problem
    assert "pip uninstall tensorflow tensorflow-tpu" in problem


@pytest.mark.parametrize("libtpu", ["0.0.46", "0.0.52", "0.0.10"])
def test_a_libtpu_without_tensorflows_functions_is_refused_before_tensorflow_aborts(libtpu):
    problem = Installed({"tensorflow-tpu": "2.20.0"}, libtpu).problems()
    assert f"libtpu {libtpu} lacks functions" in problem
    assert "pip install 'libtpu==0.0.21'" in problem


def test_the_pinned_libtpu_is_the_tpu_extras():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'tpu = \["tensorflow-tpu==2\.20\.0", "libtpu==0\.0\.21"\]', pyproject)


def test_the_tpu_build_off_a_tpu_host_starts_without_its_tpu_library(monkeypatch):
    """Else it asks the cloud metadata server 30 times per value: 8 minutes to import."""
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setattr("bertfit.tf_build.tpu_attached", lambda: False)
    check_installed(Installed({"tensorflow-tpu": "2.20.0"}, "0.0.21"))
    assert os.environ["TPU_LIBRARY_PATH"] == os.devnull


def test_on_a_tpu_host_or_with_the_users_own_path_the_tpu_library_is_left_alone(monkeypatch):
    tpu_build = Installed({"tensorflow-tpu": "2.20.0"}, "0.0.21")
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setattr("bertfit.tf_build.tpu_attached", lambda: True)
    check_installed(tpu_build)
    assert "TPU_LIBRARY_PATH" not in os.environ
    monkeypatch.setattr("bertfit.tf_build.tpu_attached", lambda: False)
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/libtpu.so")
    check_installed(tpu_build)
    assert os.environ["TPU_LIBRARY_PATH"] == "/opt/libtpu.so"


def test_a_problem_is_an_install_error():
    with pytest.raises(InstallError, match="not installed"):
        check_installed(Installed({}, None))


def test_the_fatal_line_is_found_and_explained():
    text = "I0000 some note\n" + LIBTPU_ABORT + "\n*** Check failure stack trace: ***\n"
    explained = explain_fatal(text)
    assert explained.startswith(LIBTPU_ABORT)
    assert "pip install 'libtpu==0.0.21'" in explained
    symbol = "ImportError: .../_pywrap_tensorflow_internal.so: undefined symbol: _ZN3tsl6..."
    assert "two TensorFlow builds" in explain_fatal(symbol)


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_an_abort_while_tensorflow_loads_shows_its_fatal_line_and_meaning():
    """The start-up output is kept off the terminal, except when the process dies in it."""
    done = _python(
        f"""
        import os
        from bertfit.tf_startup import start_output_kept
        with start_output_kept():
            os.write(2, b"I0000 a note nobody needs\\n{LIBTPU_ABORT}\\n")
            os.abort()
        """
    )
    assert done.returncode == -6  # SIGABRT, as TensorFlow's fatal log ends
    assert LIBTPU_ABORT in done.stderr
    assert "this means the installed libtpu lacks functions" in done.stderr
    assert "a note nobody needs" not in done.stderr


def test_a_start_that_goes_through_prints_nothing_of_it():
    done = _python(
        """
        import os
        from bertfit.tf_startup import start_output_kept
        with start_output_kept():
            os.write(2, b"I0000 start-up noise\\n")
        print("after")
        """
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "after\n", "")


def test_the_cli_refuses_two_builds_in_one_folder_before_loading_tensorflow(tmp_path):
    """A second distribution's metadata beside the real one, as pip leaves it after
    `pip install bertfit[cpu]` over tensorflow-tpu (or the TPU build over tensorflow)."""
    other = "tensorflow" if Installed.here().tpu_build else "tensorflow-tpu"
    info = tmp_path / f"{other.replace('-', '_')}-2.20.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {other}\nVersion: 2.20.0\n")
    data = tmp_path / "train.csv"  # read before TensorFlow loads: it must be a good one
    data.write_text("text,label\ngood,pos\nbad,neg\n")
    done = subprocess.run(
        [sys.executable, "-m", "bertfit.cli", "train", "--model", "x", "--train", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
    )
    assert done.returncode == 2, done.stderr
    assert f"{other} 2.20.0" in done.stderr and "are installed over each other" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_readmes_install_table_is_what_bertfit_says():
    for page in ("README.md", "docs/install.md"):  # the table, and the manual's page on it
        text = (ROOT / page).read_text()
        for accelerator, commands in INSTALL.items():
            for command in commands:
                assert command in text, (page, accelerator, command)


@pytest.mark.slow
def test_the_gpu_extra_resolves_to_tensorflow_with_cudas_libraries_from_pip(tmp_path):
    """README's GPU line, as far as a machine without a GPU can take it: pip's resolver (a dry
    run against the package index) picks TensorFlow with NVIDIA's CUDA libraries, no TPU build,
    and tensorflow-text of the same minor. The TPU line is installed for real by
    scripts/tpu_install_check.sh (make test-tpu-install). pip reads each wheel's metadata with
    HTTP range requests (fast-deps): a plain dry run downloads every wheel it picks, 2.8 GB of
    CUDA libraries (38 s -> 14 s)."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    command += ["--use-feature", "fast-deps"]
    command += [
        "--report",
        str(report),
        f"{ROOT}[gpu]",
        "-c",
        str(ROOT / "constraints/tf-2.21.txt"),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert chosen["tensorflow"] == "2.21.0" and chosen["tensorflow-text"].startswith("2.21.")
    assert "nvidia-cudnn-cu12" in chosen and "nvidia-cublas-cu12" in chosen
    assert "tensorflow-tpu" not in chosen and "libtpu" not in chosen
