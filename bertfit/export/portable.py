"""What the LiteRT and ONNX exports share: which classifiers they take, the model as a frozen
numeric function, and writing an export folder whole or not at all.

Both formats take a classifier loaded from a run directory (ONNX with any tokenizer, LiteRT
with a WordPiece one: `bertfit.export.litert`); the folder they write, `OUT/<version>/`, holds
the model file and `bertfit.json` (the labels and what the model's inputs and outputs are), so
that a client needs no bertfit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import keras
import tensorflow as tf

from bertfit.data.tasks import REGRESSION
from bertfit.errors import BertfitError, ConfigError
from bertfit.inference.graph import ClassifierModule, next_version
from bertfit.inference.outputs import calibrated_logits
from bertfit.model import layers
from bertfit.model.losses import outputs as logit_meaning
from bertfit.text.base import InGraphTokenizer
from bertfit.text.pruned import PrunedTokenizer
from bertfit.tf_startup import verbose

METADATA_NAME = "bertfit.json"
QUANTIZATIONS = ("int8",)


# What TensorFlow logs while a classifier is frozen, saved and read back for a converter, each
# harmless for an export and worded like a failure; `converter_notes_quiet` drops exactly these.
HARMLESS_CONVERTER_NOTES = (
    # Freezing exports a meta graph whose collection holds the vocabulary table's initializer,
    # which collections cannot serialize: the table itself is in the graph, and converts.
    "Issue encountered when serializing table_initializer",
    # The LiteRT round trip saves without custom gradients on purpose: nothing takes gradients
    # of an export.
    "with ops with unsaved custom gradients",
)


class _HarmlessNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(note in message for note in HARMLESS_CONVERTER_NOTES)


@contextlib.contextmanager
def converter_notes_quiet():
    """Keeps `HARMLESS_CONVERTER_NOTES` off the terminal while a converter runs (every other
    warning, and every error, still shows); BERTFIT_VERBOSE_TF=1 keeps them too."""
    if verbose():
        yield
        return
    quiet, loggers = _HarmlessNotes(), [logging.getLogger(n) for n in ("tensorflow", "absl")]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def check_portable(classifier, format_name: str) -> ClassifierModule:
    """The classifier's `ClassifierModule`, or a `ConfigError` saying why `format_name` cannot
    hold it: it must come from a run directory and truncate texts (not `--long-documents
    chunk`). A pruned vocabulary's model takes the whole vocabulary's ids (`whole_tokenizer`)
    and renumbers them (`renumbered`)."""
    module = classifier.module
    if not isinstance(module, ClassifierModule):
        raise ConfigError(
            f"--format {format_name} exports from a run directory (bertfit train's --output-dir), "
            "not from a SavedModel export; pass --run RUN_DIR."
        )
    if module.windows is not None:
        raise ConfigError(
            f"--format {format_name} does not take a --long-documents chunk model: its model "
            "reads one packed row per text, while a chunk model needs each document cut into "
            "overlapping windows that are encoded together and pooled, which bertfit does in "
            "TensorFlow ops of the SavedModel's graph only. Export it with --format saved-model "
            "(whole documents in, for TF Serving or `bertfit serve`), or train with "
            "--long-documents truncate."
        )
    return module


def whole_tokenizer(tokenizer: InGraphTokenizer) -> InGraphTokenizer:
    """The tokenizer whose ids an export takes: a pruned vocabulary's whole one (bertfit
    distill --prune-vocab; the model renumbers the ids: `renumbered`), else `tokenizer`."""
    return tokenizer.tokenizer if isinstance(tokenizer, PrunedTokenizer) else tokenizer


def renumbered(tokenizer: InGraphTokenizer, word_ids: tf.Tensor) -> tf.Tensor:
    """int32 `word_ids` of `whole_tokenizer(tokenizer)` as the model's ids: a pruned
    vocabulary's new ids (an id not kept becomes the unknown token's), else as they are."""
    return tokenizer.renumber(word_ids) if isinstance(tokenizer, PrunedTokenizer) else word_ids


def check_quantize(quantize: str | None) -> None:
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ConfigError(f"--quantize {quantize!r}: expected one of {QUANTIZATIONS}.")


def output_name(module: ClassifierModule) -> str:
    """`value` for a regression model, else `probabilities`."""
    return "value" if module.task.kind == REGRESSION else "probabilities"


def numeric_outputs(module: ClassifierModule, logits: tf.Tensor) -> dict[str, tf.Tensor]:
    """The model's one numeric output: probabilities (softmax, or a sigmoid per label for a
    multi-label model) of the calibrated logits or, for regression, the value in the training
    targets' units."""
    meaning = logit_meaning(module.task.kind, calibrated_logits(module.task, logits))
    if module.task.kind == REGRESSION:
        return {"value": meaning[:, 0] * module.task.std + module.task.mean}
    return {"probabilities": meaning}


def exact_gelu(x: tf.Tensor) -> tf.Tensor:
    """The erf GELU written as converters recognise it (`0.5 * x * (1 + erf(x / sqrt 2))`, one
    GELU op in LiteRT); `bertfit.model.layers.gelu` computes the same with its gradient written
    out, which the LiteRT converter leaves as an `Erf` op it has no kernel for."""
    return 0.5 * x * (1.0 + tf.math.erf(x / 1.4142135623730951))


@contextlib.contextmanager
def convertible_activations(model: keras.Model):
    """Within the block, the model's erf-GELU layers use `exact_gelu` (the same function)."""
    swapped = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Dense) and layer.activation is layers.gelu
    ]
    for layer in swapped:
        layer.activation = exact_gelu
    try:
        yield
    finally:
        for layer in swapped:
            layer.activation = layers.gelu


def metadata(module: ClassifierModule, format_name: str, quantize: str | None, **extra) -> dict:
    """`bertfit.json`: what a client needs besides the model file."""
    return {
        "format": format_name,
        "quantize": quantize,
        "task": module.task.to_dict(),
        "labels": list(module.task.labels),
        "max_seq_length": module.max_seq_length,
        "pairs": module.pairs,
        "output": output_name(module),
        **extra,
    }


def write_export(root: str | Path, version: int | None, write: Callable[[Path], None]) -> Path:
    """Calls `write(folder)` on a temporary folder beside `root/<version>/` (the next free
    version by default) and renames it into place: the version appears whole or not at all."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file; pass a folder for the exported versions.")
    version = next_version(root) if version is None else version
    final = root / str(version)
    if final.exists():
        raise ConfigError(
            f"{final} exists already; pass another --version or leave it out for the next free one."
        )
    return write_folder(final, write)


def write_folder(final: Path, write: Callable[[Path], None]) -> Path:
    """Calls `write(folder)` on a temporary folder beside `final` (absent, or an empty folder)
    and renames it into place: `final` appears whole or not at all, and a parent folder made
    for it is removed again when the write fails."""
    parent = final.parent
    created = not parent.exists()
    parent.mkdir(parents=True, exist_ok=True)
    temporary = parent / f".{final.name}.tmp-{os.getpid()}"
    try:
        temporary.mkdir()
        write(temporary)
        os.replace(temporary, final)
    except (OSError, tf.errors.OpError) as e:  # a full disk, a quota: one line, nothing left
        reason = getattr(e, "strerror", None) or getattr(e, "message", None) or e
        shutil.rmtree(temporary, ignore_errors=True)
        if created:
            shutil.rmtree(parent, ignore_errors=True)
        raise ExportWriteError(
            f"cannot write the export {final} ({str(reason).splitlines()[0][:200]}); the "
            "partial export was removed. Free space or choose another output folder, and rerun."
        ) from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return final


class ExportWriteError(BertfitError):
    """The system refused to write an export (a full disk, a quota, no permission)."""


def write_metadata(folder: Path, data: dict) -> None:
    (folder / METADATA_NAME).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
