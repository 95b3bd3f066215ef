"""The model server without its transport: what `bertfit serve`'s REST API (`bertfit.serve.app`,
`bertfit.serve.rest`) and a gRPC PredictionService share.

`ModelCore` holds the served versions of one model and answers TF Serving's five calls with
Python values, never with HTTP or protobuf:

- `find(name, version, label)` → the `ServedVersion` a model spec names (TF Serving's rules:
  no version and no label is the latest version);
- `predict(served, signature_name, rows)` → {output name: array [batch, ...]};
- `classify(served, signature_name, examples)` → per example [(label, score), ...];
- `regress(served, signature_name, examples)` → per example one float;
- `model_status(name, version, label)` / `model_metadata(name, version, label)` → the
  GetModelStatusResponse / GetModelMetadataResponse as TF Serving prints them in JSON.

Predict's `rows` are one dict per instance ({input name: value}: a str or bytes for a string
input, a list of ints for an id input); classify's and regress' `examples` are serialized
`tf.train.Example`s. Every refusal is a `ServingError` whose `code` is TF Serving's status code
(`INVALID_ARGUMENT`, `NOT_FOUND`, `FAILED_PRECONDITION`, `INTERNAL`: the names of
`grpc.StatusCode`); `HTTP_STATUS` maps them as TF Serving's HTTP server does. An error the
model raises on a request (`tf.errors.InvalidArgumentError`) is the request's fault:
`INVALID_ARGUMENT`, with the line of TensorFlow's message that says what was wrong.

Every predict instance is checked here, before it can join a batch with other requests'
instances: texts must be valid Unicode, ids must fit the model (`IdLimits`: the vocabulary, the
type vocabulary, the position table), rows must not be empty or ragged. A fault is named by its
instance index and says what was expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from bertfit.inference.graph import (
    CLASSIFY_SIGNATURE,
    DEFAULT_SIGNATURE,
    REGRESS_SIGNATURE,
    IdLimits,
)
from bertfit.inference.predictor import Classifier, text_problem
from bertfit.model.inputs import MASK, TYPE_IDS, WORD_IDS
from bertfit.serve.batching import DynamicBatcher
from bertfit.serve.deep_json import excerpt
from bertfit.serve.metrics import ServingMetrics
from bertfit.serve.options import ServeOptions

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
INIT_OP_SIGNATURE = "__saved_model_init_op"

# TF Serving's status codes (absl::StatusCode; grpc.StatusCode has the same names).
INVALID_ARGUMENT = "INVALID_ARGUMENT"
NOT_FOUND = "NOT_FOUND"
FAILED_PRECONDITION = "FAILED_PRECONDITION"
INTERNAL = "INTERNAL"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
UNAVAILABLE = "UNAVAILABLE"
UNIMPLEMENTED = "UNIMPLEMENTED"
DATA_LOSS = "DATA_LOSS"
# model_servers/http_server.cc ToHTTPStatusCode.
HTTP_STATUS = {
    INVALID_ARGUMENT: 400,
    NOT_FOUND: 404,
    FAILED_PRECONDITION: 400,
    INTERNAL: 500,
    RESOURCE_EXHAUSTED: 429,
    DEADLINE_EXCEEDED: 504,
    UNAVAILABLE: 503,
    UNIMPLEMENTED: 501,
}
# A served text is cut to this many characters per token of max_seq_length before it is
# tokenized (`cut_text`): tokenization costs at most that, whatever a client sends.
CHARS_PER_TOKEN = 64

_DTYPES = {"string": "DT_STRING", "float32": "DT_FLOAT", "int32": "DT_INT32", "int64": "DT_INT64"}
_INT_BITS = {"int32": 32, "int64": 64}


# A version's states (ModelVersionStatus.State, get_model_status.proto).
START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"


@dataclasses.dataclass
class VersionState:
    """A version's state as GetModelStatus reports it (ModelVersionStatus)."""

    state: str
    error_code: str = "OK"
    error_message: str = ""

    def to_dict(self, version: int) -> dict:
        return {
            "version": str(version),
            "state": self.state,
            "status": {"error_code": self.error_code, "error_message": self.error_message},
        }


class ServingError(Exception):
    """A call TF Serving would refuse: `code` is its status code (see `HTTP_STATUS`);
    `http_status` overrides the HTTP status of `code` for what only HTTP has (413, 408)."""

    def __init__(self, message: str, code: str = INVALID_ARGUMENT, http_status: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status or HTTP_STATUS.get(code, 500)


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature: numpy dtype name, shape (None for any), and the
    graph tensor's name as the SavedModel records it."""

    dtype: str
    shape: tuple
    tensor_name: str


@dataclasses.dataclass(frozen=True)
class Signature:
    """One signature of a served version, as its SignatureDef describes it."""

    name: str
    method_name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]

    @classmethod
    def of(cls, name: str, function, call: str = "StatefulPartitionedCall") -> Signature:
        """From a concrete function (a SavedModel signature), with the tensor names
        `tf.saved_model.save` gives it: inputs `<signature>_<input>:0`, outputs `<call>:<i>`
        in the order of their sorted names (`call` is `StatefulPartitionedCall`, `_1`, `_2`...
        for the signatures in the order of their names)."""

        args, kwargs = function.structured_input_signature
        specs = kwargs or {t.name: t for t in args}
        inputs = {
            k: TensorInfo(v.dtype.name, tuple(v.shape.as_list()), f"{name}_{k}:0")
            for k, v in specs.items()
        }
        outputs = {
            k: TensorInfo(v.dtype.name, tuple(v.shape.as_list()), f"{call}:{i}")
            for i, (k, v) in enumerate(sorted(function.structured_outputs.items()))
        }
        return cls(name, _method_of(name), inputs, outputs)

    def signature_def(self) -> dict:
        """The SignatureDef in JSON, as TF Serving's metadata API prints it."""

        def tensors(infos: dict[str, TensorInfo]) -> dict:
            return {
                name: {
                    "dtype": _DTYPES.get(info.dtype, info.dtype),
                    "tensor_shape": {
                        "dim": [
                            {"size": str(-1 if d is None else d), "name": ""} for d in info.shape
                        ],
                        "unknown_rank": False,
                    },
                    "name": info.tensor_name,
                }
                for name, info in infos.items()
            }

        return {
            "inputs": tensors(self.inputs),
            "outputs": tensors(self.outputs),
            "method_name": self.method_name,
            "defaults": {},
        }


def _method_of(signature_name: str) -> str:
    return {CLASSIFY_SIGNATURE: CLASSIFY_METHOD, REGRESS_SIGNATURE: REGRESS_METHOD}.get(
        signature_name, PREDICT_METHOD
    )


# What `tf.saved_model.save` writes beside the signatures, and TF Serving lists with them.
INIT_OP_SIGNATURE_DEF = {
    "inputs": {},
    "outputs": {
        INIT_OP_SIGNATURE: {
            "dtype": "DT_INVALID",
            "tensor_shape": {"dim": [], "unknown_rank": True},
            "name": "NoOp",
        }
    },
    "method_name": "",
    "defaults": {},
}


class ServedVersion:
    """One loaded version of the model: its classifier, signatures and batcher.

    `texts_engine`, when given, is the same model run by another engine (`bertfit serve
    --engine onnx`: a `bertfit.inference.onnx_runtime.OnnxClassifier` of the run's ONNX export):
    it answers the text requests the batcher gathers; the signatures (metadata, `classify_ids`,
    the Classify and Regress APIs) stay the TensorFlow graph's, whose outputs it equals to 1e-5.
    """

    def __init__(
        self,
        version: int,
        classifier: Classifier,
        max_batch: int = ServeOptions.max_batch,
        max_wait: float = ServeOptions.max_wait,
        saved_model_dir: str | Path | None = None,
        texts_engine=None,
        batch_threads: int = ServeOptions.batch_threads,
    ):
        self.version = version
        self.classifier = classifier
        self.texts_engine = texts_engine or classifier
        self.functions = classifier.signatures()
        self.signatures = {
            name: Signature.of(name, self.functions[name], _saved_call(i))
            for i, name in enumerate(sorted(self.functions))
        }
        self.signature_defs = _saved_signature_defs(saved_model_dir) or {
            **{name: s.signature_def() for name, s in self.signatures.items()},
            INIT_OP_SIGNATURE: INIT_OP_SIGNATURE_DEF,
        }
        self.limits = IdLimits.of_module(classifier.module)
        self.batcher = DynamicBatcher(self._classify_texts, max_batch, max_wait, batch_threads)
        self.max_text_chars = text_bound(classifier)

    def examples_per_call(self, count: int) -> int:
        """How many of a request's `count` tf.Examples go into one model call: all of them, or
        for long documents (a `--long-documents chunk` model) as many as the classifier's
        `batch_size` windows hold at `max_chunks` windows each."""
        windows = self.classifier.windows
        if windows is None:
            return count
        return max(1, self.classifier.batch_size // windows.max_chunks)

    def _classify_texts(self, rows: list[dict]) -> list[dict]:
        """The batcher's batch in one model call (a request larger than `max_batch`, which
        comes whole, in calls of `max_batch` rows): each text is tokenized once. Long documents
        (a `--long-documents chunk` model) go through `Classifier.outputs`, which batches them
        by windows: at most the classifier's `batch_size` windows a call."""
        if self.classifier.windows is not None:
            return _rows(self.classifier.outputs([row["text"] for row in rows]))
        results = []
        for start in range(0, len(rows), self.batcher.max_batch):
            chunk = rows[start : start + self.batcher.max_batch]
            texts = [row["text"] for row in chunk]
            pairs = [row["text_pair"] for row in chunk] if self.classifier.pairs else None
            results += _rows(self.texts_engine.classify_batch(texts, pairs))
        return results


def text_bound(classifier: Classifier) -> int | None:
    """The most characters of a served text that can reach the model's tokens:
    `CHARS_PER_TOKEN` per token of `max_seq_length` (times `max_chunks` windows for long
    documents); None when the classifier does not say its length."""
    length = classifier.metadata.get("max_seq_length")
    if not length:
        return None
    windows = classifier.windows
    return CHARS_PER_TOKEN * int(length) * (windows.max_chunks if windows is not None else 1)


def cut_text(text: str | bytes, bound: int | None) -> str | bytes:
    """`text` cut to at most `bound` characters, at its last whitespace in the second half of
    the bound if there is one (a word is never split there).

    The model truncates every text to `max_seq_length` tokens; the cut keeps the ids the model
    sees whenever the kept part still makes that many tokens, which every text with fewer than
    `CHARS_PER_TOKEN` characters per token does (runs of whitespace or words longer than that
    are what could make fewer). It bounds the tokenizer's time on a huge text.

    >>> cut_text("one two three", 9), cut_text("abcdefgh", 4), cut_text("short", None)
    ('one two', 'abcd', 'short')
    """
    if bound is None or len(text) <= bound:
        return text
    raw = isinstance(text, bytes)
    if raw:  # valid UTF-8 (checked before): cut characters, not bytes
        text = text.decode("utf-8")
        if len(text) <= bound:
            return text.encode("utf-8")
    end = next((i for i in range(bound, bound // 2 - 1, -1) if text[i].isspace()), bound)
    kept = text[:end]
    return kept.encode("utf-8") if raw else kept


def cut_example(serialized: bytes, bound: int | None) -> bytes:
    """A serialized tf.Example with each text of its bytes features cut to `bound` characters
    (`cut_text`); as it came when it is too short to hold a longer text, or is not a
    tf.Example of UTF-8 texts (the model says what is wrong with it)."""
    if bound is None or len(serialized) <= bound:  # a text of N characters has N bytes or more
        return serialized
    try:
        example = tf.train.Example.FromString(serialized)
        for feature in example.features.feature.values():
            if feature.WhichOneof("kind") == "bytes_list":  # touching another kind sets it
                values = feature.bytes_list.value
                values[:] = [cut_text(value, bound) for value in values]
    except (DecodeError, UnicodeDecodeError):
        return serialized
    return example.SerializeToString()


def _saved_call(index: int) -> str:
    """The node `tf.saved_model.save` names the call of its `index`-th signature (by name)."""
    return "StatefulPartitionedCall" + (f"_{index}" if index else "")


def read_saved_model(folder: str | Path):
    """The SavedModel proto of a version folder, read as TensorFlow's reader reads it
    (`cc/saved_model/reader.cc` ReadSavedModel, ReadBinaryProto), which is what TF Serving's
    loader reports a version's failure with: no `saved_model.pb` is NOT_FOUND, one that does
    not parse DATA_LOSS (`ServingError`s with TensorFlow's messages)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = Path(folder) / "saved_model.pb"
    try:
        content = path.read_bytes()
    except OSError:
        raise ServingError(
            f"Could not find SavedModel .pb or .pbtxt at supplied export directory path: "
            f"{folder}. Check that the directory exists and that you have the right "
            "permissions for accessing it.",
            NOT_FOUND,
        ) from None
    try:
        return saved_model_pb2.SavedModel.FromString(content)
    except DecodeError:
        raise ServingError(f"Can't parse {path} as binary proto", DATA_LOSS) from None


def _saved_signature_defs(saved_model_dir: str | Path | None) -> dict | None:
    """The SignatureDefs of an export as its saved_model.pb records them (None in memory)."""
    if saved_model_dir is None:
        return None
    from google.protobuf import json_format

    saved = read_saved_model(saved_model_dir)
    return {
        name: json_format.MessageToDict(
            signature, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        for name, signature in saved.meta_graphs[0].signature_def.items()
    }


class ModelCore:
    """The served versions of one model, and TF Serving's calls on them.

    Args:
        model_name: the model's name (TF Serving's `--model_name`).
        versions: version number → its `ServedVersion`.
        version_labels: label → version (TF Serving's `version_labels`).
        max_request_instances: most instances in one request.
        max_queued_requests: most requests in progress at once (reading, queued or running);
            one more is RESOURCE_EXHAUSTED (429), so memory stays bounded under any load.
    """

    def __init__(
        self,
        model_name: str,
        versions: list[ServedVersion],
        version_labels: dict[str, int] | None = None,
        max_request_instances: int = ServeOptions.max_request_instances,
        max_queued_requests: int = ServeOptions.max_queued_requests,
    ):
        self.model_name = model_name
        self.versions: dict[int, ServedVersion] = {}
        self.states: dict[int, VersionState] = {}  # every version known, loaded or not
        self.manager = None  # a `bertfit.serve.versions.VersionManager` polling the export
        self.version_labels = dict(version_labels or {})
        self.max_request_instances = max_request_instances
        self.max_queued_requests = max_queued_requests
        self.in_progress = 0
        self.draining = False  # set on SIGTERM: new requests are UNAVAILABLE
        self.metrics = ServingMetrics()
        for served in versions:
            self.add(served)

    def add(self, served: ServedVersion) -> None:
        """Serves `served` (its batcher reports to this core's metrics): AVAILABLE."""
        served.batcher.metrics = self.metrics
        served.batcher.pool_name = self.model_name
        self.versions = dict(sorted({**self.versions, served.version: served}.items()))
        self.set_state(served.version, VersionState(AVAILABLE))

    def remove(self, version: int) -> None:
        """Stops routing requests to `version` (those it holds still finish)."""
        self.versions = {n: s for n, s in self.versions.items() if n != version}

    def set_state(self, version: int, state: VersionState) -> None:
        """`version`'s state, for GetModelStatus and the model_version_state metric."""
        previous = self.states.get(version)
        if previous is not None:
            self.metrics.model_state.remove(
                model_name=self.model_name, version=str(version), state=previous.state
            )
        self.states[version] = state
        self.metrics.model_state.set(
            1, model_name=self.model_name, version=str(version), state=state.state
        )

    def admit(self) -> Admission:
        """A model call's admission: `with core.admit():` refuses it when the server is
        draining (UNAVAILABLE) or `max_queued_requests` are in progress (RESOURCE_EXHAUSTED),
        and counts it in progress until it ends."""
        return Admission(self)

    def record(self, model_name: str, api: str, entrypoint: str, status: str, started: float):
        """TF Serving's request metrics for a request begun at `started` (`time.monotonic()`)
        that ended with `status` (a status code name): request_count counts every request,
        request_latency (whole microseconds) only those that succeeded (`http_server.cc`
        ProcessRequest, `prediction_service_impl.cc`)."""
        self.metrics.request_count.add(model_name=model_name, status=status)
        if status == "OK":
            microseconds = int((time.monotonic() - started) * 1e6)
            self.metrics.request_latency.add(
                microseconds, model_name=model_name, API=api, entrypoint=entrypoint
            )

    @contextlib.contextmanager
    def recorded(self, model_name: str, api: str, entrypoint: str):
        """`record`s the request the block answers, with the status of what it raises."""
        started = time.monotonic()
        try:
            yield
        except BaseException as error:
            self.record(model_name, api, entrypoint, status_code(error), started)
            raise
        self.record(model_name, api, entrypoint, "OK", started)

    @property
    def latest(self) -> ServedVersion:
        return self.versions[max(self.versions)]

    def start(self) -> None:
        """Starts the batchers, and the polling of the export (in the running event loop)."""
        for served in self.versions.values():
            served.batcher.start()
        if self.manager is not None:
            self.manager.start()

    async def stop(self) -> None:
        if self.manager is not None:
            await self.manager.stop()
        for served in self.versions.values():
            await served.batcher.stop()

    # ---- model specs ----

    def find(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> ServedVersion:
        """The version a model spec names; TF Serving's errors for what it cannot find."""
        if version is not None and label is not None:
            raise ServingError(
                f"Both model version ({version}) and model version label ({label}) cannot be "
                "supplied."
            )
        if label is not None:  # server_core.cc GetModelVersionForLabel
            if name != self.model_name or label not in self.version_labels:
                raise ServingError(f"Unrecognized servable version label: {label}")
            version = self.version_labels[label]
            if version not in self.versions:  # the label's version was unloaded
                raise ServingError(
                    f"Servable not found for request: Specific({name}, {version})", NOT_FOUND
                )
        if name != self.model_name or (version is not None and version not in self.versions):
            found = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise ServingError(f"Servable not found for request: {found}", NOT_FOUND)
        return self.latest if version is None else self.versions[version]

    def signature(self, served: ServedVersion, name: str | None, method: str) -> Signature:
        """The signature `name` ("" or None: the method's default) for a call of `method`.

        TF Serving's default is always `serving_default`, which in a bertfit export is the
        text predict signature; for classify and regress bertfit defaults to its `classify` /
        `regress` signature instead (docs/serving.md)."""
        if not name:
            name = {CLASSIFY_METHOD: CLASSIFY_SIGNATURE, REGRESS_METHOD: REGRESS_SIGNATURE}.get(
                method, DEFAULT_SIGNATURE
            )
        if name not in served.signatures:
            if method == PREDICT_METHOD:
                raise ServingError(f'Serving signature name: "{name}" not found in signature def')
            raise ServingError(f"No signature was found with the name: {name}")
        signature = served.signatures[name]
        if method != PREDICT_METHOD and signature.method_name != method:
            kind = "classification" if method == CLASSIFY_METHOD else "regression"
            raise ServingError(
                f"Expected {kind} signature method_name to be {method}. Was: "
                f"{signature.method_name}"
            )
        return signature

    # ---- the calls ----

    async def predict(
        self, served: ServedVersion, signature_name: str | None, rows: list[dict]
    ) -> dict[str, np.ndarray]:
        """Runs the signature on `rows` (checked first, see the module's docstring); returns
        each output by name, batch first. No rows: the outputs of an empty batch, as TF
        Serving answers `{"inputs": []}`."""
        signature = self.signature(served, signature_name, PREDICT_METHOD)
        if not rows:
            return await self.predict_no_rows(served, signature.name)
        check_rows(rows, signature, served.limits, self.max_request_instances)
        try:
            if signature.name == DEFAULT_SIGNATURE:
                rows = [_cut_texts(row, served.max_text_chars) for row in rows]
                return _columns(await served.batcher.submit(rows), signature)
            inputs = {
                name: tf.constant([row[name] for row in rows], tf.as_dtype(info.dtype))
                for name, info in signature.inputs.items()
            }
            function = served.functions[signature.name]
            result = await served.batcher.run_alone(lambda: function(**inputs))
            return {k: v.numpy() for k, v in result.items()}
        except (tf.errors.InvalidArgumentError, UnicodeError) as e:
            raise ServingError(model_error(e)) from None

    async def predict_no_rows(
        self, served: ServedVersion, signature_name: str, arrays: dict | None = None
    ) -> dict[str, np.ndarray]:
        """The signature run on a batch of no rows (TF Serving runs the graph on it): each
        output of shape [0, ...]. `arrays` are the inputs of shape [0, ...] (by default [0]
        for a text input, [0, 1] for an id input: the ids signature wants a row length)."""
        specs = served.signatures[signature_name].inputs
        if arrays is None:
            arrays = {
                name: np.zeros([0, 1][: len(info.shape)], _numpy_dtype(info.dtype))
                for name, info in specs.items()
            }
        tensors = {k: tf.constant(v, tf.as_dtype(specs[k].dtype)) for k, v in arrays.items()}
        function = served.functions[signature_name]
        try:
            result = await served.batcher.run_alone(lambda: function(**tensors))
        except (tf.errors.InvalidArgumentError, UnicodeError) as e:
            raise ServingError(model_error(e)) from None
        return {k: v.numpy() for k, v in result.items()}

    async def classify(
        self, served: ServedVersion, signature_name: str | None, examples: list[bytes]
    ) -> list[list[tuple[str, float]]]:
        """Per serialized tf.Example, its (label, score) pairs in the labels' order."""
        outputs = await self._run_examples(served, signature_name, examples, CLASSIFY_METHOD)
        classes, scores = outputs["classes"], outputs["scores"]
        return [
            [(c.decode("utf-8"), float(s)) for c, s in zip(row_c, row_s, strict=True)]
            for row_c, row_s in zip(classes, scores, strict=True)
        ]

    async def regress(
        self, served: ServedVersion, signature_name: str | None, examples: list[bytes]
    ) -> list[float]:
        """Per serialized tf.Example, the predicted value."""
        outputs = await self._run_examples(served, signature_name, examples, REGRESS_METHOD)
        return [float(v) for v in np.reshape(outputs["outputs"], [-1])]

    async def _run_examples(
        self, served: ServedVersion, signature_name: str | None, examples: list[bytes], method: str
    ) -> dict[str, np.ndarray]:
        signature = self.signature(served, signature_name, method)
        if not examples:
            raise ServingError("Input is empty.")
        if len(examples) > self.max_request_instances:
            raise ServingError(_too_many(len(examples), self.max_request_instances))
        function = served.functions[signature.name]
        size = served.examples_per_call(len(examples))
        examples = [cut_example(example, served.max_text_chars) for example in examples]

        def run() -> dict[str, np.ndarray]:
            parts = [
                function(inputs=tf.constant(examples[start : start + size], tf.string))
                for start in range(0, len(examples), size)
            ]
            return {k: np.concatenate([part[k].numpy() for part in parts]) for k in parts[0]}

        try:
            return await served.batcher.run_alone(run)
        except (tf.errors.InvalidArgumentError, UnicodeError) as e:
            raise ServingError(model_error(e)) from None

    def model_status(self, name: str, version: int | None = None, label: str | None = None) -> dict:
        """GetModelStatusResponse in JSON: every served version, or the one named. As TF
        Serving's GetModelStatusImpl, a version label is ignored (every version is listed)."""
        if name != self.model_name or not self.states:
            raise ServingError(f"Could not find any versions of model {name}", NOT_FOUND)
        if version is None:
            chosen = sorted(self.states.items(), reverse=True)  # as TF Serving: newest first
        elif version in self.states:
            chosen = [(version, self.states[version])]
        else:
            raise ServingError(f"Could not find version {version} of model {name}", NOT_FOUND)
        return {"model_version_status": [state.to_dict(number) for number, state in chosen]}

    def model_metadata(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> dict:
        """GetModelMetadataResponse in JSON as TF Serving's REST API prints it (the
        SignatureDefMap unpacked from its Any, so without "@type")."""
        served = self.find(name, version, label)
        return {
            "model_spec": {"name": name, "signature_name": "", "version": str(served.version)},
            "metadata": {"signature_def": {"signature_def": served.signature_defs}},
        }


def _numpy_dtype(dtype: str):
    return object if dtype == "string" else dtype


class Admission:
    """See `ModelCore.admit`."""

    def __init__(self, core: ModelCore):
        self.core = core

    def __enter__(self) -> Admission:
        core = self.core
        if core.draining:
            raise ServingError(
                "the server is shutting down (SIGTERM): it finishes the requests it has and "
                "takes no new ones; send this one to another replica",
                UNAVAILABLE,
            )
        if core.in_progress >= core.max_queued_requests:
            raise ServingError(
                f"the server has {core.in_progress} requests in progress, the most it queues "
                f"(--max-queued-requests {core.max_queued_requests}); retry after a short wait, "
                "or send fewer requests at once",
                RESOURCE_EXHAUSTED,
            )
        core.in_progress += 1
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.core.in_progress -= 1


def status_code(error: BaseException | None) -> str:
    """TF Serving's status code name for how a request ended."""
    if error is None:
        return "OK"
    if isinstance(error, ServingError):
        return error.code
    if isinstance(error, (tf.errors.InvalidArgumentError, UnicodeError)):
        return INVALID_ARGUMENT
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    if isinstance(error, TimeoutError):
        return DEADLINE_EXCEEDED
    return INTERNAL


def _cut_texts(row: dict, bound: int | None) -> dict:
    """A text predict instance with each text cut to `bound` characters (`cut_text`)."""
    return {name: cut_text(value, bound) for name, value in row.items()}


def _rows(outputs: dict[str, np.ndarray]) -> list[dict]:
    """{name: [batch, ...]} → one {name: value} per row."""
    size = len(next(iter(outputs.values())))
    return [{name: values[i] for name, values in outputs.items()} for i in range(size)]


def _columns(rows: list[dict], signature: Signature) -> dict[str, np.ndarray]:
    """One {name: value} per row → {name: [batch, ...]}, in the signature's dtypes."""
    return {
        name: np.array([row[name] for row in rows], _numpy_dtype(info.dtype))
        for name, info in signature.outputs.items()
    }


def model_error(error: Exception) -> str:
    """The line of a TensorFlow error that says what was wrong, without its graph trace."""
    if not isinstance(error, tf.errors.OpError):
        return f"the model could not take the request: {error}"
    skip = ("[[", "File ", "Detected at node", "Graph execution error", "<stack traces")
    lines = [line.strip() for line in error.message.splitlines()]
    useful = [line for line in lines if line and not line.startswith(skip)]
    return f"the model refused the request: {useful[-1] if useful else error.message}"[:2000]


def _too_many(count: int, most: int) -> str:
    return (
        f"the request has {count} instances; at most {most} are accepted in one request "
        "(split it, or start the server with a larger --max-request-instances)"
    )


# ---- the checks of predict instances ----


def check_rows(rows: list[dict], signature: Signature, limits: IdLimits, max_rows: int) -> None:
    """`ServingError`s for instances the model cannot take (see the module's docstring)."""
    if not rows:
        raise ServingError("the request has no instances")
    if len(rows) > max_rows:
        raise ServingError(_too_many(len(rows), max_rows))
    for index, row in enumerate(rows):
        _check_row(row, signature, index, limits)
    _check_not_ragged(rows, signature)


def _check_row(row: dict, signature: Signature, index: int, limits: IdLimits) -> None:
    missing = set(signature.inputs) - set(row)
    extra = set(row) - set(signature.inputs)
    if missing or extra:
        raise ServingError(
            f"instance {index}: expected the inputs "
            f"{', '.join(signature.inputs)}; missing {sorted(missing)}, "
            f"unknown {sorted(extra)}"
        )
    for name, info in signature.inputs.items():
        value, where = row[name], f"instance {index}: input {name!r}"
        if info.dtype == "string":
            if not isinstance(value, (str, bytes)):
                raise ServingError(f"{where} must be a string, got {_quoted(value)}")
            if signature.method_name == PREDICT_METHOD:
                problem = text_problem(value)
                if problem is not None:
                    raise ServingError(f"{where} {problem}; send the text as valid UTF-8")
        elif info.dtype in _INT_BITS:
            _check_ids(value, where, name, info, limits)
    _check_lengths(row, signature, index, limits)


def _quoted(value) -> str:
    if isinstance(value, bytes):
        return repr(value)[:60]
    return excerpt(value, 60)


def _check_ids(value, where: str, name: str, info: TensorInfo, limits: IdLimits) -> None:
    """One instance's row of integer ids: a non-empty list of integers in the input's range."""
    if not (isinstance(value, list) and all(type(v) is int for v in value)):
        raise ServingError(
            f"{where} must be a list of integers (one row of shape {list(info.shape[1:])}), "
            f"got {_quoted(value)}"
        )
    if not value:
        raise ServingError(f"{where} is empty; every row needs at least one id")
    low, high, expected = _id_range(name, info.dtype, limits)
    if low <= min(value) and max(value) < high:
        return
    position, bad = next((i, v) for i, v in enumerate(value) if not low <= v < high)
    raise ServingError(f"{where} has {bad} at position {position}; {expected}")


def _id_range(name: str, dtype: str, limits: IdLimits) -> tuple[int, int, str]:
    """[low, high) and what it means, for the values of input `name`."""
    if name == MASK:
        return 0, 2, "input_mask values must be 0 (padding) or 1 (a token)"
    if name == WORD_IDS and limits.vocab_size is not None:
        size = limits.vocab_size
        return 0, size, f"ids must be in [0, {size}): the model's vocabulary has {size} tokens"
    if name == TYPE_IDS and limits.type_vocab_size is not None:
        size = max(limits.type_vocab_size, 1)
        return 0, size, f"type ids must be in [0, {size}): the model has {size} token type(s)"
    bits = _INT_BITS[dtype]
    low = 0 if name in (WORD_IDS, TYPE_IDS) else -(2 ** (bits - 1))
    return low, 2 ** (bits - 1), f"values must be in [{low}, {2 ** (bits - 1)}) ({dtype})"


def _check_lengths(row: dict, signature: Signature, index: int, limits: IdLimits) -> None:
    """An instance's id rows all have one length, at most the position table's."""
    lengths = {
        name: len(row[name]) for name, info in signature.inputs.items() if info.dtype in _INT_BITS
    }
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ServingError(
            f"instance {index}: {listed} values; every input of an instance must have the "
            "same length (one value per token)"
        )
    longest = limits.max_length
    if lengths and longest is not None and max(lengths.values()) > longest:
        raise ServingError(
            f"instance {index}: {max(lengths.values())} ids; the model takes at most "
            f"{longest} per row (its position table): truncate the row to {longest} ids"
        )


def _check_not_ragged(rows: list[dict], signature: Signature) -> None:
    """The instances of one request form one [batch, seq] tensor: their rows have one length."""
    names = [name for name, info in signature.inputs.items() if info.dtype in _INT_BITS]
    if not names:
        return
    first = len(rows[0][names[0]])
    for index, row in enumerate(rows):
        if len(row[names[0]]) != first:
            raise ServingError(
                f"instance {index} has {len(row[names[0]])} ids but instance 0 has {first}; "
                "every instance of a request must have the same length: pad the shorter rows "
                "(with input_mask 0) or send them in separate requests"
            )
