"""The sweep directory: one sweep's runs and what it concluded.

    SWEEP/
      sweep.json      the sweep: its spec (grid, seeds, folds, budget) and the base run config;
                      written first, it marks the directory as this sweep's
      folds/          with --folds: fold-K-train.jsonl, fold-K-valid.jsonl (what fold K's run
                      trains on, and chooses on) and fold-K-heldout.jsonl (what it only
                      predicts): the training rows split, in the training file's columns; and
                      folds.json (each row's fold)
      runs/TRIAL/seedS[-foldK]/   a normal bertfit run directory per run
      runs/TRIAL/oof-seedS.jsonl  with --folds: out-of-fold predictions, every training row once
      runs/TRIAL/heldout-seedS.json  with --folds: each fold's metrics on its held-out rows
      results.json    every run's score, each trial's mean ± sd, the chosen trial and run
      chosen.yaml     the chosen trial's run config (`bertfit train --config chosen.yaml`)
      report.html     trials compared: the metric against the learning rate, the spread per seed
      sweep.log       what happened, readable
      audit/          `bertfit audit`'s labels likely wrong (bertfit.sweeps.audit)

One directory holds one sweep: a directory holding another sweep's spec (or files that are no
sweep's) is refused, unless none of its runs started (a sweep refused before training leaves
the directory to the corrected command), and a lock (`.lock`, as a run directory's) keeps a
second `bertfit tune` out while one works in it. Every file is written whole (`bertfit.atomic`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from bertfit.atomic import leftover_of, write_text_atomic
from bertfit.config import RunConfig, config_differences
from bertfit.errors import ConfigError
from bertfit.runs.records import DIVERGED, FINISHED
from bertfit.runs.run_dir import LOCK_FILE, RUN_ENTRIES, RunDir
from bertfit.sweeps.spec import SweepSpec
from bertfit.training.run_dir import RunBusy, RunLock

SWEEP_ENTRIES = {
    "sweep.json",
    "folds",
    "runs",
    "results.json",
    "chosen.yaml",
    "report.html",
    "sweep.log",
    "audit",  # `bertfit audit`'s default output (bertfit.sweeps.audit)
}


class SweepDir:
    """Paths, checks and writers of one sweep directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    spec_file = property(lambda self: self.path / "sweep.json")
    folds_dir = property(lambda self: self.path / "folds")
    runs_dir = property(lambda self: self.path / "runs")
    results_file = property(lambda self: self.path / "results.json")
    chosen_file = property(lambda self: self.path / "chosen.yaml")
    report_file = property(lambda self: self.path / "report.html")
    log_file = property(lambda self: self.path / "sweep.log")

    def claim(self, spec: SweepSpec, base: RunConfig) -> tuple[RunLock, str | None]:
        """Locks the directory for this sweep and checks that it is new or holds this sweep
        (`record` writes its spec). Returns the lock and a note when a dead process's lock was
        taken over.

        Raises:
            ConfigError: another sweep, a run, or other files are there; or a live
                `bertfit tune` holds the directory.
        """
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--output-dir {self.path} is a file; choose a directory path.")
        lock = RunLock(self.path)
        try:
            note = lock.acquire()
        except RunBusy:
            raise ConfigError(
                f"--output-dir {self.path} is in use by another bertfit tune; two sweeps in one "
                "directory would mix their runs. Wait for it to finish, or choose another "
                "--output-dir."
            ) from None
        try:
            self._remove_leftovers()
            self._check_is_ours(spec, base)
        except BaseException:
            lock.release()
            raise
        return lock, note

    def record(self, spec: SweepSpec, base: RunConfig) -> None:
        """Writes sweep.json (a new sweep's), which marks the directory as this sweep's."""
        if not self.spec_file.exists():
            document = {"spec": spec.to_dict(), "config": _base_dict(base)}
            write_text_atomic(self.spec_file, json.dumps(document, indent=2))

    def _check_is_ours(self, spec: SweepSpec, base: RunConfig) -> None:
        entries = {p.name for p in self.path.iterdir()} - {LOCK_FILE}
        if not entries:
            return
        if not self.spec_file.exists() or not entries <= SWEEP_ENTRIES:
            strangers = sorted(entries - SWEEP_ENTRIES) or ["no sweep.json"]
            raise ConfigError(
                f"--output-dir {self.path} holds files that are not a bertfit sweep "
                f"({', '.join(strangers[:5])}); bertfit tune will not write into it. Choose a "
                "new or empty --output-dir."
            )
        saved = json.loads(self.spec_file.read_text(encoding="utf-8"))
        differences = [
            f"{key}: {saved['spec'].get(key)!r} → {value!r}"
            for key, value in spec.to_dict().items()
            if saved["spec"].get(key) != value
        ]
        differences += config_differences(
            RunConfig.from_dict(saved["config"], str(self.spec_file)), base
        )
        if differences and not self._trained_any():
            # refused before any run trained (a bad value, a data error): nothing to keep
            self.spec_file.unlink()
            shutil.rmtree(self.folds_dir, ignore_errors=True)
            return
        if differences:
            raise ConfigError(
                f"--output-dir {self.path} holds another sweep ({'; '.join(differences)}). "
                "Rerun that sweep's own command to continue it, or choose another --output-dir "
                "(a sweep directory never mixes two sweeps)."
            )

    def _trained_any(self) -> bool:
        """Whether a run of the sweep got as far as writing its config (it trained, or is
        resumable): a sweep with none can be replaced by another without losing anything."""
        return any(self.runs_dir.glob(f"*/*/{RunDir(self.path).config_file.name}"))

    def _remove_leftovers(self) -> None:
        """The temporary files a killed write left (see `bertfit.atomic`)."""
        for entry in self.path.iterdir():
            found = leftover_of(entry.name)
            if found and found[0] in SWEEP_ENTRIES and found[1] != os.getpid():
                entry.unlink(missing_ok=True)

    def log(self, message: str) -> None:
        with self.log_file.open("a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")


def run_state(path: Path) -> str:
    """ "finished", "diverged", "unfinished" (resumable: `bertfit train` continues it) or
    "new"; a run killed before it wrote its config is cleared first (it holds nothing to
    resume), and anything that is not a run is refused."""
    run = RunDir(path)
    if run.status() == "foreign":
        entries = {p.name for p in path.iterdir()} - {LOCK_FILE}
        ours = all(name in RUN_ENTRIES or leftover_of(name) for name in entries)
        if run.config_file.exists() or not ours:
            raise ConfigError(
                f"{path} is a sweep's run directory but holds other files; move them away "
                "and rerun the sweep."
            )
        shutil.rmtree(path)  # killed between creating the run and writing its config
        return "new"
    if run.status() == "new":
        return "new"
    status = run.metrics_status()
    if status in (FINISHED, DIVERGED):
        return status
    return "unfinished"


def _base_dict(base: RunConfig) -> dict:
    return {**base.to_dict(), "output_dir": None}
