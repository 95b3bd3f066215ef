"""`--engine onnx`: a classifier's ONNX export (`bertfit export --format onnx`) run in ONNX Runtime,
behind the interface of `bertfit.inference.predictor.Classifier` (`predict`, `predict_proba`,
`outputs`, `classify_batch`), without TensorFlow.

    clf = load_onnx_classifier("exported/sst-onnx")     # the folder of versions, or one version
    clf.predict(["a gripping film", "dull"])             # the rows Classifier.predict gives

Why: a process that imports TensorFlow spends ~2.3 s of a 2-core CPU on that import before it
reads a text (`bench/predict_engines.py` measures it), more than the forward pass of a thousand
short texts. The export's `tokenizer.json` (read by the `tokenizers` package) gives the in-graph
tokenizer's ids, id for id (tests/export/test_onnx.py), and its model computes the SavedModel's
probabilities to float rounding, so the rows are the TensorFlow engine's (tests/test_engines.py:
within 1e-5).

As the TensorFlow predictor does, texts are sorted by their number of tokens and batched in that
order, each batch padded to its longest text (not to a length bucket: ONNX Runtime takes any
length); results come back in input order. A regression model gives `value`, a multi-label
model its `predicted` and `labels`, computed from the probabilities as the graph computes them
(`bertfit.inference.outputs.numpy_task_outputs`).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertfit.data.tasks import Task
from bertfit.errors import BertfitError, MissingDependencyError
from bertfit.inference.outputs import numpy_task_outputs
from bertfit.inference.texts import (
    BATCH_SIZE,
    LENGTHS_CHUNK,
    TextClassifier,
    checked_batch_size,
    length_lanes,
)

METADATA_NAME = "bertfit.json"  # beside model.onnx, as bertfit.export.portable writes it
MODEL_NAME = "model.onnx"
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


class OnnxClassifier(TextClassifier):
    """A classifier from an ONNX export folder (`model.onnx`, `tokenizer.json`, `bertfit.json`).

    Args:
        folder: one version's folder of a `bertfit export --format onnx`.
        batch_size: texts per call of the model, at least 1.
        threads: ONNX Runtime's intra-op threads (None: its default, one per physical core).
        calls: model calls `classify_batch` runs at once (`length_lanes`), each on
            `threads` threads.
    """

    def __init__(
        self,
        folder: Path,
        batch_size: int = BATCH_SIZE,
        threads: int | None = None,
        calls: int = 1,
    ):
        ort = _require("onnxruntime")
        tokenizers = _require("tokenizers")
        self.folder = folder
        self.metadata = _read_metadata(folder)
        self.task = Task.from_dict(self.metadata["task"])
        self.labels: list[str] = list(self.task.labels)
        self.pairs: bool = bool(self.metadata.get("pairs"))
        self.batch_size = checked_batch_size(batch_size)
        self.windows = None  # the ONNX export holds no --long-documents chunk model
        self.output_name = self.metadata["output"]
        self.tokenizer = tokenizers.Tokenizer.from_file(str(folder / self.metadata["tokenizer"]))
        self.pad_id = (self.tokenizer.padding or {}).get("pad_id", 0)
        self.tokenizer.no_padding()  # each batch is padded to its own longest row (`_run`)
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1  # one model call at a time: no parallel branches
        # Idle threads sleep instead of spinning for the next op. On a 2-core machine shared
        # with other processes (load 8), a pass over 1,283 texts took 5.8-6.1 CPU seconds and
        # 19-20 s instead of 8.3-8.5 and 23-28 s: a spinning thread takes the core another
        # thread of the same op needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(folder / MODEL_NAME), options, providers=["CPUExecutionProvider"]
        )
        self.calls = calls
        self._callers = (  # ONNX Runtime's run releases the GIL: the calls share no lock
            concurrent.futures.ThreadPoolExecutor(calls, thread_name_prefix="onnx")
            if calls > 1
            else None
        )

    def outputs(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, progress=None
    ) -> dict[str, np.ndarray]:
        """As `Classifier.outputs`: every output by name, rows in input order. Every text is
        tokenized first (once), then the model runs batch after batch: the tokenizer's threads
        and ONNX Runtime's never compete for the cores."""
        ids, type_ids = self._encode(self._rows(texts, text_pairs))
        order = np.argsort([len(row) for row in ids], kind="stable")
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if progress is not None:
            progress.total = max(len(batches), 1)
        parts, done = [self._empty()], 0
        for step, chosen in enumerate(batches, start=1):
            parts.append(self._run([ids[i] for i in chosen], [type_ids[i] for i in chosen]))
            done += len(chosen)
            if progress is not None:
                progress.update(step, done)
        meaning = np.concatenate(parts)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return numpy_task_outputs(self.task, meaning[inverse])

    def classify_batch(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """As `Classifier.classify_batch`: rows in the order given, from a model call per run of
        texts of similar lengths (a served batch mixes short and long texts), `calls` of them
        at once (`bertfit.inference.texts.length_lanes`)."""
        ids, type_ids = self._encode(self._rows(texts, text_pairs))
        lanes = length_lanes([len(row) for row in ids], self.calls)

        def run(groups: list[np.ndarray]) -> list[np.ndarray]:
            return [self._run([ids[i] for i in g], [type_ids[i] for i in g]) for g in groups]

        results = map(run, lanes) if self._callers is None else self._callers.map(run, lanes)
        meaning = np.empty((len(ids), *self._empty().shape[1:]), np.float32)
        for groups, lane_results in zip(lanes, results, strict=True):
            for group, result in zip(groups, lane_results, strict=True):
                meaning[group] = result
        return numpy_task_outputs(self.task, meaning)

    def _encode(self, rows: list) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each row's token ids and type ids (special tokens in, truncated to the run's
        max_seq_length), `LENGTHS_CHUNK` rows per call of the tokenizer."""
        ids, type_ids = [], []
        for start in range(0, len(rows), LENGTHS_CHUNK):
            for encoding in self.tokenizer.encode_batch(rows[start : start + LENGTHS_CHUNK]):
                ids.append(np.asarray(encoding.ids, np.int64))
                type_ids.append(np.asarray(encoding.type_ids, np.int64))
        return ids, type_ids

    def _run(self, ids: list[np.ndarray], type_ids: list[np.ndarray]) -> np.ndarray:
        """The model's numeric output (probabilities, or the value) for one batch, padded to
        its longest row."""
        width = max(len(row) for row in ids)
        word_ids = np.full((len(ids), width), self.pad_id, np.int64)
        mask = np.zeros((len(ids), width), np.int64)
        types = np.zeros((len(ids), width), np.int64)
        for i, (row, row_types) in enumerate(zip(ids, type_ids, strict=True)):
            word_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
            types[i, : len(row)] = row_types
        feed = dict(zip(INPUT_NAMES, (word_ids, mask, types), strict=True))
        (result,) = self.session.run([self.output_name], feed)
        return result

    def _empty(self) -> np.ndarray:
        width = () if self.output_name == "value" else (len(self.labels),)
        return np.zeros((0, *width), np.float32)

    def _rows(self, texts, text_pairs) -> list:
        """The texts checked as every engine checks them, as the tokenizer takes them: str, or
        (str, str) for a pair."""
        texts, text_pairs = self.checked_texts(texts, text_pairs)
        if text_pairs is None:
            return [_as_str(t) for t in texts]
        return [(_as_str(a), _as_str(b)) for a, b in zip(texts, text_pairs, strict=True)]


def _as_str(text: str | bytes) -> str:
    return text if isinstance(text, str) else bytes(text).decode("utf-8")


def onnx_version_dir(path: Path) -> Path:
    """`path` itself when it holds model.onnx, else its newest numeric version that does."""
    if (path / MODEL_NAME).is_file():
        return path
    versions = sorted(
        (int(p.name) for p in path.iterdir() if p.name.isdigit() and (p / MODEL_NAME).is_file())
        if path.is_dir()
        else []
    )
    if (path / "config.yaml").is_file():
        raise BertfitError(
            f"{path} is a run directory; ONNX Runtime runs its ONNX export: `bertfit predict "
            "--engine onnx` makes it once and keeps it in the run, or pass the folder of "
            "`bertfit export --format onnx` (`bertfit.export.onnx_engine.onnx_engine_folder` "
            "from Python)."
        )
    if not versions:
        raise BertfitError(
            f"--engine onnx: {path} is neither a run directory nor an ONNX export (a folder "
            f"holding {MODEL_NAME}, or numbered versions of one): pass a run directory, an "
            "export of `bertfit export --format onnx`, or --engine tensorflow for a SavedModel "
            "export."
        )
    return path / str(versions[-1])


def _read_metadata(folder: Path) -> dict:
    file = folder / METADATA_NAME
    try:
        metadata = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BertfitError(
            f"--engine onnx: cannot read {file} ({e}); it is written by `bertfit export "
            "--format onnx` beside model.onnx: export the run again."
        ) from None
    if metadata.get("format") != "onnx" or not {"task", "output", "tokenizer"} <= set(metadata):
        raise BertfitError(
            f"--engine onnx: {file} does not describe an ONNX export of bertfit (its format, "
            "task, output and tokenizer); export the run again with --format onnx."
        )
    return metadata


def load_onnx_classifier(path: str | Path, **kwargs) -> OnnxClassifier:
    """The classifier of an ONNX export: its folder of versions (the newest is used) or one
    version's folder. `**kwargs`: `batch_size`, `threads`, `calls`."""
    return OnnxClassifier(onnx_version_dir(Path(path)), **kwargs)


def _require(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        raise MissingDependencyError(
            f"--engine onnx needs {name}: pip install 'bertfit[export]'."
        ) from None
