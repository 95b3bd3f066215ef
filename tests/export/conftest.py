"""The tiny trained run (tests/conftest.py `trained_run`) exported once per format and
precision, the texts the exports are checked on, and bertfit's own probabilities for them; the
C++ SavedModel runner."""

from __future__ import annotations

import csv
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bertfit.cli import main

# Beside the run's evaluation split: case, punctuation, accents, CJK, an empty text and one
# longer than max_seq_length (16), which every path must truncate alike.
PROBES = [
    "Hello, WORLD! It's a film.",
    "naïve déjà-vu?!",
    "東京 film good",
    "",
    "the good film " * 12,
]


@pytest.fixture(scope="session")
def export_texts(trained_run) -> list[str]:
    config, _ = trained_run
    with open(config.data.eval, newline="", encoding="utf-8") as f:
        return [row["text"] for row in csv.DictReader(f)] + PROBES


@pytest.fixture(scope="session")
def bertfit_probabilities(trained_run, export_texts):
    from bertfit.inference.predictor import load_classifier

    _, summary = trained_run
    return load_classifier(summary.run_dir).predict_proba(export_texts)


@pytest.fixture(scope="session")
def portable_export(trained_run, tmp_path_factory):
    """`portable_export(format, quantize)`: the folder `bertfit export` wrote (once each)."""
    _, summary = trained_run
    done = {}

    def export(format_name: str, quantize: str | None = None):
        if (format_name, quantize) not in done:
            root = tmp_path_factory.mktemp("export") / f"{format_name}-{quantize or 'fp32'}"
            flags = ["--quantize", quantize] if quantize else []
            argv = ["export", "--format", format_name, *flags, "--run", summary.run_dir]
            assert main([*argv, str(root)]) == 0
            done[format_name, quantize] = root / "1"
        return done[format_name, quantize]

    return export


@pytest.fixture(scope="session")
def saved_model_runner(request):
    """The C++ SavedModel runner (tests/export/loaders.py) as a future: compiled (15-30 s) in a
    thread while the tests build their exports, or found in pytest's cache (the temporary
    folder without the cache plugin), where it stays between sessions."""
    from tests.export.loaders import build_runner

    cache = getattr(request.config, "cache", None)
    folder = (
        cache.mkdir("saved_model_runner")
        if cache is not None
        else Path(tempfile.gettempdir()) / "bertfit-saved-model-runner"
    )
    with ThreadPoolExecutor(1) as executor:
        yield executor.submit(build_runner, Path(folder))
