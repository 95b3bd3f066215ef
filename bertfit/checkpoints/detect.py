"""What format is this path? One place that recognises every checkpoint bertfit reads.

`detect(path)` looks at file names and small headers only (no weights are read and no model is
run); `read_detected` then hands the path to the reader of that format.

Hugging Face checkpoints (safetensors, pytorch_model.bin) are recognised and read without
TensorFlow; the TensorFlow formats (TF1 and TF2 checkpoints, SavedModels, TF1 Hub modules)
import it when one is found, and where it is not installed are refused in one line naming the
extra that installs it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from bertfit.checkpoints import archive
from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.formats import (
    MODULE_FILE,
    PREPROCESSING,
    REUSABLE,
    SIGNATURE_ONLY,
    TF1_SAVEDMODEL,
)
from bertfit.checkpoints.hf import has_safetensors, is_hf_dir, read_hf
from bertfit.checkpoints.tf1 import find_checkpoint_prefix, list_checkpoint
from bertfit.checkpoints.tf2 import is_object_based
from bertfit.errors import CheckpointError
from bertfit.tf_build import require_tensorflow

if TYPE_CHECKING:
    from bertfit.checkpoints.savedmodel import SavedModelInfo

# format → (what it is, what writes it)
FORMATS = {
    "hf": (
        "Hugging Face directory (config.json + model.safetensors)",
        "transformers save_pretrained / safetensors",
    ),
    "hf-bin": (
        "Hugging Face directory with a PyTorch pytorch_model.bin",
        "transformers save_pretrained (PyTorch, pre-safetensors) / torch.save",
    ),
    "tf1-checkpoint": (
        "Google's original TF1 BERT checkpoint (bert_model.ckpt, bert/... names)",
        "google-research/bert (tf.compat.v1 Saver)",
    ),
    "tf2-checkpoint": (
        "TF2 object-based checkpoint of a Model Garden BertEncoder",
        "tf.train.Checkpoint (TensorFlow Model Garden)",
    ),
    REUSABLE: (
        "TF2 SavedModel, reusable (TF Hub BERT interface, trainable variables exposed)",
        "tf.saved_model.save (TF Hub / Model Garden export, bertfit convert --to tf-hub)",
    ),
    SIGNATURE_ONLY: (
        "SavedModel with signatures only (no trainable variables exposed)",
        "tf.saved_model.save with signatures= only, or a TF1 SavedModel builder",
    ),
    TF1_SAVEDMODEL: (
        "TF1 SavedModel (a graph with signatures only: nothing exposed to fine-tune)",
        "tf.compat.v1.saved_model.Builder / simple_save (TF1)",
    ),
    "tf1-hub-module": (
        "TF1 Hub module (tfhub_module.pb + TF1 graph + variables)",
        "tensorflow_hub 0.x Module.export (TF1)",
    ),
    PREPROCESSING: (
        "TF Hub-style BERT preprocessing model (strings in, token ids out)",
        "tf.saved_model.save (TF Hub preprocess / bertfit convert --to tf-hub)",
    ),
}
FINE_TUNABLE = {"hf", "hf-bin", "tf1-checkpoint", "tf2-checkpoint", REUSABLE, "tf1-hub-module"}


def _needs_tensorflow(path: Path, description: str) -> None:
    """Refuses a TensorFlow format where TensorFlow is not installed (a JAX-only machine)."""
    require_tensorflow(
        f"reading {path} ({description})",
        "Hugging Face checkpoints, config.json with model.safetensors or pytorch_model.bin, "
        "load without it",
    )


@dataclasses.dataclass
class Detection:
    """A recognised checkpoint: its format, where its files are, and anything worth saying."""

    format: str
    path: Path  # as given
    root: Path  # the folder (or checkpoint prefix) holding the files, after extraction
    archive: Path | None = None
    savedmodel: SavedModelInfo | None = None

    @property
    def description(self) -> str:
        return FORMATS[self.format][0]

    @property
    def writer(self) -> str:
        return FORMATS[self.format][1]

    @property
    def fine_tunable(self) -> bool:
        return self.format in FINE_TUNABLE


def detect(path: str | Path) -> Detection:
    """Recognises the checkpoint at `path` (a folder, a checkpoint prefix, a file or an archive)."""
    path = Path(path)
    if archive.is_archive(path):
        inner = archive.content_root(archive.extract(path))
        try:
            found = detect(inner)
        except CheckpointError as e:
            raise CheckpointError(f"{path} (extracted to {inner}): {e}") from e
        found.path, found.archive = path, path
        return found
    if path.is_file() and path.name in (
        MODULE_FILE,
        "saved_model.pb",
        "config.json",
        "model.safetensors",
        "pytorch_model.bin",
    ):
        path = path.parent
    if not path.exists() and not Path(f"{path}.index").is_file():
        raise CheckpointError(f"{path}: no such file or directory.")
    if path.is_dir() and (path / MODULE_FILE).is_file():
        return Detection("tf1-hub-module", path, path)
    if path.is_dir() and (path / "saved_model.pb").is_file():
        _needs_tensorflow(path, "a SavedModel")
        from bertfit.checkpoints.savedmodel import inspect_savedmodel

        info = inspect_savedmodel(path)
        return Detection(info.kind, path, path, savedmodel=info)
    if is_hf_dir(path):
        return Detection("hf" if has_safetensors(path) else "hf-bin", path, path)
    if path.is_dir() and (path / "checkpoint").is_file():  # its index is TensorFlow's to read
        _needs_tensorflow(path, "a TensorFlow checkpoint")
    prefix = find_checkpoint_prefix(path)
    if prefix is not None:
        _needs_tensorflow(prefix, "a TensorFlow checkpoint")
        names = list_checkpoint(prefix)
        if is_object_based(names):
            return Detection("tf2-checkpoint", path, prefix)
        if any(n.endswith("bert/embeddings/word_embeddings") for n in names):
            return Detection("tf1-checkpoint", path, prefix)
        sample = ", ".join(sorted(names)[:5])
        raise CheckpointError(
            f"{prefix}: a TF checkpoint, but not of a BERT bertfit knows (names such as {sample}). "
            "bertfit reads Google's TF1 BERT (bert/embeddings/...) and Model Garden TF2 "
            "BertEncoder checkpoints; export the encoder in one of the formats `bertfit inspect` "
            "lists."
        )
    raise unknown_error(path)


def unknown_error(path: Path) -> CheckpointError:
    found = (
        ", ".join(sorted(p.name for p in path.iterdir())[:12]) or "nothing"
        if path.is_dir()
        else f"a file of {path.stat().st_size} bytes"
    )
    return CheckpointError(
        f"{path}: not a checkpoint bertfit recognises (found {found}). Expected one of: a Hugging "
        "Face directory (config.json + model.safetensors or pytorch_model.bin); a Google TF1 "
        "checkpoint (bert_config.json + bert_model.ckpt.index/.data-* + vocab.txt); a TF2 "
        "checkpoint (*.index); a TF2 SavedModel (saved_model.pb + variables/); a TF1 Hub module "
        "(tfhub_module.pb); or a .tar/.tar.gz/.zip of one. If the download was cut short, fetch "
        "it again."
    )


def read_detected(found: Detection) -> Checkpoint:
    """Reads a detected checkpoint into memory with its format's reader."""
    if found.format in ("hf", "hf-bin"):
        checkpoint = read_hf(found.root)
        checkpoint.detection = found
        return checkpoint
    _needs_tensorflow(found.path, found.description)
    from bertfit.checkpoints import hub_module, savedmodel, tf1, tf2

    if found.format == "tf1-checkpoint":
        checkpoint = tf1.read_tf1(found.root)
    elif found.format == "tf2-checkpoint":
        checkpoint = tf2.read_tf2(found.root)
    elif found.format == "tf1-hub-module":
        checkpoint = hub_module.read_hub_module(found.root)
    elif found.format == REUSABLE:
        checkpoint = savedmodel.read_savedmodel(found.root, found.savedmodel)
    elif found.format == PREPROCESSING:
        raise savedmodel.preprocessing_error(found.path)
    elif found.format in (SIGNATURE_ONLY, TF1_SAVEDMODEL):
        raise savedmodel.signature_only_error(found.path, found.savedmodel)
    else:  # pragma: no cover - FORMATS and this function change together
        raise CheckpointError(f"{found.path}: no reader for format {found.format!r}.")
    checkpoint.detection = found
    return checkpoint
