"""The ONNX export that `--engine onnx` runs for a run directory: made once, kept in the run
directory (`RUN/onnx-engine/<version>/`, written whole or not at all by
`bertfit.export.portable.write_export`), and made again only when the run changes.

A kept export records the run's fingerprint (`run_fingerprint`: the names, sizes and modification
times of the run's config, labels, encoder and checkpoint files). While it matches, finding it
takes a few `stat` calls and imports no TensorFlow, which is the point of the engine; when it
does not (a resumed run saved a new best checkpoint), the export is made anew (TensorFlow and
tf2onnx: ~30 s for MiniLM-L6 on 2 cores) and the older ones are removed.

A run whose model an ONNX export cannot hold (`--long-documents chunk`) is refused with the
reason (`bertfit.export.portable.check_portable`) and the engine that runs it. A remote run
(gs://, s3://) is refused too: its export would be kept where the run is, so export it yourself
(`bertfit export --format onnx`) and pass that folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from bertfit import storage
from bertfit.errors import ConfigError, MissingDependencyError
from bertfit.inference.onnx_runtime import METADATA_NAME, MODEL_NAME
from bertfit.runs.records import FINISHED

CACHE_DIR = "onnx-engine"  # in the run directory (bertfit.runs.run_dir.RUN_ENTRIES)
# What the engine runs with (bertfit.inference.onnx_runtime), and what making a run's export
# takes besides (bertfit.export.onnx): the export extra's packages.
RUNS_WITH = ("onnxruntime", "tokenizers")
MADE_WITH = ("tf2onnx", "onnx")
# What decides the model the export holds: a change in any of these makes it anew.
RUN_SOURCES = ("config.yaml", "labels.json", "encoder", "checkpoints")


def check_engine_installed(path: str | Path) -> None:
    """The packages `--engine onnx` needs for `path`, looked for before TensorFlow loads: those
    it runs with, and those that make the export when a run directory has none kept yet.

    Raises:
        MissingDependencyError: naming the missing ones and the extra that installs them.
    """
    needed = RUNS_WITH + (MADE_WITH if _export_to_make(path) else ())
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f"--engine onnx needs {', '.join(missing)}: pip install 'bertfit[export]' (or run "
            "with --engine tensorflow, the default, which needs none of them)."
        )


def _export_to_make(path: str | Path) -> bool:
    if storage.is_url(path) or not (Path(path) / "config.yaml").is_file():
        return False
    return kept_export(Path(path), run_fingerprint(Path(path))) is None


def onnx_engine_folder(path: str | Path, quiet: bool = False) -> Path:
    """The folder `--engine onnx` runs for `path`: a run directory's kept export (made first when
    there is none, or the run changed since, saying so unless `quiet`), or `path` itself (an
    ONNX export; its loader checks it)."""
    if storage.is_url(path):
        raise ConfigError(
            f"--engine onnx keeps the run's ONNX export in its run directory, and {path} is "
            "remote: export it first (bertfit export --format onnx --run RUN OUT) and pass "
            "--run OUT, or use --engine tensorflow."
        )
    path = Path(path)
    if not (path / "config.yaml").is_file():
        return path
    fingerprint = run_fingerprint(path)
    kept = kept_export(path, fingerprint)
    if kept is not None:
        return kept
    if not quiet:
        print(
            f"bertfit: --engine onnx: exporting {path} to ONNX, once (about 30 s for MiniLM-L6 on "
            f"2 CPU cores); later calls run the export kept in {path / CACHE_DIR}",
            file=sys.stderr,
            flush=True,
        )
    return _make_export(path, fingerprint)


def run_unfinished(path: str | Path) -> bool:
    """Whether `path` is a local run directory whose metrics.json does not say it finished (read
    without TensorFlow: the CLI then says which checkpoint it uses)."""
    if storage.is_url(path) or not (Path(path) / "config.yaml").is_file():
        return False
    try:
        metrics = json.loads((Path(path) / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(metrics, dict) or metrics.get("status") != FINISHED


def run_fingerprint(run: Path) -> str:
    """A hash of the names, sizes and modification times of the files the model comes from."""
    digest = hashlib.sha256()
    for name in RUN_SOURCES:
        source = run / name
        files = sorted(source.rglob("*")) if source.is_dir() else [source]
        for file in files:
            if file.is_file():
                stat = file.stat()
                digest.update(
                    f"{file.relative_to(run)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
                )
    return digest.hexdigest()[:32]


def kept_export(run: Path, fingerprint: str) -> Path | None:
    """The newest kept export made from the run as `fingerprint` says it is, else None."""
    root = run / CACHE_DIR
    if not root.is_dir():
        return None
    versions = sorted((int(p.name) for p in root.iterdir() if p.name.isdigit()), reverse=True)
    for version in versions:
        folder = root / str(version)
        if _source_of(folder) == fingerprint and (folder / MODEL_NAME).is_file():
            return folder
    return None


def _source_of(folder: Path) -> str | None:
    try:
        metadata = json.loads((folder / METADATA_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return metadata.get("run_fingerprint") if isinstance(metadata, dict) else None


def _make_export(run: Path, fingerprint: str) -> Path:
    """Exports the run (with TensorFlow) into `RUN/onnx-engine/<next version>/`, then removes
    the versions made from an older state of the run."""
    from bertfit.tf_build import require_tensorflow
    from bertfit.tf_startup import start_tensorflow

    require_tensorflow(
        "--engine onnx making the run's ONNX export",
        "ONNX Runtime runs an export made on a machine that has it: bertfit export "
        "--format onnx --run RUN OUT there, then --engine onnx --run OUT",
    )
    start_tensorflow(for_inference=True)
    from bertfit.export.portable import ExportWriteError
    from bertfit.inference.predictor import Classifier

    root = run / CACHE_DIR
    try:
        folder = engine_export(Classifier.from_run(run), root, fingerprint)
    except ExportWriteError:
        folder = kept_export(run, fingerprint)  # another process made it at the same moment
        if folder is None:
            raise
    for other in root.iterdir():
        if other.name.isdigit() and other != folder and _source_of(other) != fingerprint:
            shutil.rmtree(other, ignore_errors=True)
    return folder


def engine_export(classifier, root: Path, fingerprint: str) -> Path:
    """`classifier` (from a run directory) exported to ONNX under `root`, marked with the
    run's `fingerprint`; a model ONNX cannot hold is refused with `--engine tensorflow`."""
    from bertfit.export import portable
    from bertfit.export.onnx import export_onnx

    try:
        portable.check_portable(classifier, "onnx")
    except ConfigError as e:
        raise ConfigError(
            f"--engine onnx runs the run's ONNX export, which this run cannot have: {e} Or run "
            "it with --engine tensorflow (the default), which runs every model."
        ) from None
    # Made first, so that a failed write (or one that loses a race with another process making
    # the same export) never removes the folder, nor what another process put in it.
    root.mkdir(parents=True, exist_ok=True)
    return export_onnx(classifier, root, run_fingerprint=fingerprint)
