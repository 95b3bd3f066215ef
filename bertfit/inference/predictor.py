"""`load_classifier`: a fine-tuned classifier in memory, from a run directory or an export.

    clf = bertfit.load_classifier("runs/sst")          # or an export: "exported/sst" or ".../1"
    clf.predict(["a gripping film", "dull"])            # [{"label": "pos", "probabilities": ...}]
    clf.predict_proba(["a gripping film"])              # array [1, num_labels]

Both sources run the same graph (`bertfit.inference.graph.ClassifierModule`): tokenization,
packing to the length buckets, the model and the label lookup. Its functions are traced once,
when the classifier is loaded, not once per call. Texts are sorted by their number of tokens and
batched in that order, so that short texts are not padded to the length of long ones; results
come back in input order.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit import storage
from bertfit.config import CHUNK
from bertfit.data.buckets import saved_buckets
from bertfit.data.tasks import Task
from bertfit.data.windowed import chunk_buckets
from bertfit.errors import BertfitError
from bertfit.inference.graph import METADATA_FILE, ClassifierModule, next_version
from bertfit.inference.run_model import restored_model, run_metadata
from bertfit.inference.texts import (  # noqa: F401  (serve imports text_problem from here)
    BATCH_SIZE,
    LENGTHS_CHUNK,
    TextClassifier,
    checked_batch_size,
    text_problem,
)
from bertfit.runs.run_dir import RunDir, open_run
from bertfit.text.windows import WindowSpec


class Classifier(TextClassifier):
    """A fine-tuned text classifier (or regressor): `predict` rows, `predict_proba`
    probabilities, `outputs` every named output.

    Args:
        module: a `ClassifierModule`, or a loaded export (which has the same functions).
        metadata: `task` (`Task.to_dict()`), `pairs` (whether it takes text pairs),
            `max_seq_length`, `buckets`, `columns` and `long_documents` (the windows of a
            chunk model), as `run_metadata` makes them.
        batch_size: texts per call of the model, at least 1; for a model of long documents
            (`--long-documents chunk`) windows per call: documents of similar length are
            batched together until their windows (padded to the batch's chunk-count bucket)
            would pass it, and a document needing more windows goes alone.
    """

    def __init__(self, module, metadata: dict, batch_size: int = BATCH_SIZE):
        self.module = module
        self.metadata = metadata
        self.task = Task.from_dict(metadata.get("task") or {"labels": metadata["labels"]})
        self.labels: list[str] = list(self.task.labels)
        self.pairs: bool = bool(metadata.get("pairs"))
        self.batch_size = checked_batch_size(batch_size)
        self.windows = _window_spec(metadata)

    @classmethod
    def from_run(cls, path: str | Path, which: str = "best", **kwargs) -> Classifier:
        """The run's best checkpoint (or `which="latest"`), as `bertfit train` left it."""
        run_dir = open_run(path)
        config = run_dir.load_config()
        task = run_dir.load_task()
        model = restored_model(run_dir, config, task, which)
        metadata = run_metadata(config, task)
        module = ClassifierModule(
            model,
            run_dir.load_tokenizer(),
            task,
            config.model.max_seq_length,
            list(saved_buckets(config.data.buckets, config.model.max_seq_length)),
            metadata["pairs"],
            WindowSpec.for_model(config.model),
        )
        return cls(module, metadata, **kwargs)

    @classmethod
    def from_export(cls, path: str | Path, **kwargs) -> Classifier:
        """An export written by `bertfit export` (the folder of versions: the newest)."""
        import bertfit.text.ops  # noqa: F401  (registers the tokenizer's ops)

        version = export_version_dir(Path(path))
        metadata = json.loads((version / METADATA_FILE).read_text(encoding="utf-8"))
        metadata["version"] = int(version.name) if version.name.isdigit() else 1
        return cls(tf.saved_model.load(str(version)), metadata, **kwargs)

    def signatures(self) -> dict:
        """The SavedModel signatures (name → concrete function), exported or not."""
        if isinstance(self.module, ClassifierModule):
            return self.module.serving_signatures()
        return dict(self.module.signatures)

    def outputs(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, progress=None
    ) -> dict[str, np.ndarray]:
        """Every output of the model by name (see `bertfit.inference.outputs`), rows in input
        order."""
        texts, text_pairs = self.checked_texts(texts, text_pairs)
        lengths = self._lengths(texts, text_pairs)
        order = np.argsort(lengths, kind="stable")
        batches = self._batches(order, lengths)
        if progress is not None:  # made for batches of batch_size texts; windows make more
            progress.total = max(len(batches), 1)
        parts, done = [], 0
        for step, chosen in enumerate(batches, start=1):
            pairs = None if text_pairs is None else [text_pairs[i] for i in chosen]
            parts.append(self.classify_batch([texts[i] for i in chosen], pairs))
            done += len(chosen)
            if progress is not None:
                progress.update(step, done)
        if not parts:
            return self._empty_outputs()
        outputs = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return {k: v[inverse] for k, v in outputs.items()}

    def classify_batch(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Every output of the model by name for one batch, in one call: each text tokenized
        once, rows in the order given, nothing sorted or split. For callers that make their own
        batches (`bertfit serve`'s dynamic batcher) and have checked the texts; `outputs`
        checks, sorts by length and batches."""
        columns = [texts] if text_pairs is None else [texts, text_pairs]
        outputs = self.module.classify_text(*[tf.constant(c, tf.string) for c in columns])
        return {name: value.numpy() for name, value in outputs.items()}

    def token_lengths(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None
    ) -> np.ndarray:
        """Tokens per row (a text and its pair) before truncation, without the special tokens
        (`[CLS]`, `[SEP]`); texts checked as `outputs` checks them."""
        return self._lengths(*self.checked_texts(texts, text_pairs))

    def _batches(self, order: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """The rows of each model call, in `order` (texts by their number of tokens): runs of
        `batch_size` texts, or for windowed documents of at most `batch_size` windows."""
        if self.windows is None:
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        kept = np.minimum(self.windows.windows_needed(np.asarray(lengths)), self.windows.max_chunks)
        buckets = np.asarray(chunk_buckets(self.windows.max_chunks))
        padded = buckets[np.searchsorted(buckets, kept)]  # each document's K
        batches, batch = [], []
        for row in order:  # K grows along the order: the newest row sets the batch's K
            if batch and (len(batch) + 1) * padded[row] > self.batch_size:
                batches.append(np.asarray(batch))
                batch = []
            batch.append(row)
        return [*batches, np.asarray(batch)] if batch else batches

    def _lengths(self, texts: list[str], text_pairs: list[str] | None) -> np.ndarray:
        """Tokens per row, to batch texts of similar length together."""
        columns = [texts] if text_pairs is None else [texts, text_pairs]
        if not hasattr(self.module, "token_lengths"):  # an export written before it had one
            return np.sum([[len(t) for t in column] for column in columns], axis=0)
        chunks = [
            self.module.token_lengths(
                *[tf.constant(column[start : start + LENGTHS_CHUNK]) for column in columns]
            ).numpy()
            for start in range(0, len(texts), LENGTHS_CHUNK)
        ]
        return np.concatenate([np.zeros(0, np.int32), *chunks])

    def _empty_outputs(self) -> dict[str, np.ndarray]:
        specs = self.signatures()["serving_default"].structured_outputs
        return {
            name: np.zeros((0, *spec.shape[1:]), spec.dtype.as_numpy_dtype)
            for name, spec in specs.items()
        }


def _window_spec(metadata: dict) -> WindowSpec | None:
    """The windows of a chunk model from its metadata (`run_metadata`), else None."""
    long_documents = metadata.get("long_documents") or {}
    if long_documents.get("mode") != CHUNK:
        return None
    return WindowSpec(
        metadata["max_seq_length"], long_documents["stride"], long_documents["max_chunks"]
    )


def export_version_dir(path: Path) -> Path:
    """`path` itself when it holds a saved_model.pb, else its newest numeric version."""
    if (path / "saved_model.pb").is_file():
        return path
    newest = next_version(path) - 1
    if (path / "model.onnx").is_file() or (path / str(newest) / "model.onnx").is_file():
        raise BertfitError(
            f"{path} is an ONNX export (bertfit export --format onnx), which TensorFlow does "
            "not run: pass --engine onnx (ONNX Runtime), or the run directory or a SavedModel "
            "export."
        )
    if newest < 1 or not (path / str(newest) / "saved_model.pb").is_file():
        raise BertfitError(
            f"{path} is neither a bertfit run directory nor an export "
            "(a folder of numbered versions holding saved_model.pb)."
        )
    return path / str(newest)


def load_classifier(path: str | Path, **kwargs) -> Classifier:
    """A fine-tuned classifier from a run directory (`bertfit train --output-dir`) or an export
    (`bertfit export`).

    Args:
        path: the run directory, the export folder (its newest version is used) or one
            version's folder.
        **kwargs: `batch_size` (texts per model call).

    Examples:
    >>> clf = load_classifier("runs/sst")  # doctest: +SKIP
    >>> clf.predict(["a gripping film"])[0]["label"]  # doctest: +SKIP
    'pos'
    """
    if storage.is_url(path):
        path = storage.path_text(path)
        if storage.exists(storage.join(path, "config.yaml")):
            return Classifier.from_run(path, **kwargs)
        if not storage.isdir(path):
            raise BertfitError(f"{path}: no such run directory or export.")
        return Classifier.from_export(_downloaded(path), **kwargs)
    path = Path(path)
    if not path.exists():
        raise BertfitError(f"{path}: no such run directory or export.")
    if RunDir(path).config_file.exists():
        return Classifier.from_run(path, **kwargs)
    return Classifier.from_export(path, **kwargs)


def _downloaded(url: str) -> Path:
    """A local copy of the export at `url`, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="bertfit-export-copy-"))
    atexit.register(shutil.rmtree, folder, True)
    storage.download_tree(url, folder)
    return folder
