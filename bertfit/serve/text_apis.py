"""The text classification APIs of vLLM (and SGLang) and of Hugging Face's Text Embeddings
Inference, answered from the `ModelCore` TF Serving's APIs answer from: the same batcher,
limits and metrics (`bertfit.serve.app` routes them).

- vLLM's `POST /classify` (SGLang's `POST /v1/classify`): `{"model": NAME, "input": TEXT |
  [TEXT, ...]}` → `{"id", "object": "list", "created", "model", "data": [{"index", "label",
  "probs", "num_classes"}], "usage": {"prompt_tokens", "total_tokens", "completion_tokens",
  "prompt_tokens_details"}}`, as vllm/entrypoints/pooling/classify/protocol.py
  (`ClassificationCompletionRequest`, `ClassificationResponse`) and its serving.py (`label`:
  the most probable class) define them. `"use_activation": false` answers the raw scores (see
  `raw_scores`). Errors are vLLM's `ErrorResponse`
  (vllm/entrypoints/openai/engine/protocol.py: `{"error": {"message", "type", "param",
  "code"}}`, `code` the HTTP status, `type` "BadRequestError", "NotFoundError"...).
- TEI's `POST /predict` (router/src/http/types.rs `PredictRequest`, server.rs `predict`):
  `{"inputs": TEXT | [TEXT, TEXT_PAIR] | [[TEXT], [TEXT, TEXT_PAIR], ...], "raw_scores",
  "truncate", "truncation_direction"}` → for one input its `[{"label", "score"}, ...]` sorted
  by score, highest first; for a batch one such list per input. Errors are TEI's
  `ErrorResponse` (router/src/lib.rs: `{"error", "error_type"}`, the type's name as serde
  writes it, "Validation", and the status of server.rs `From<&ErrorType> for StatusCode`).

What bertfit answers differently (docs/serving.md lists it): the scores are the model's
meaning of its logits (softmax for single-label, a sigmoid per label for multi-label, the value
for regression, whose one "label" is "value"), calibrated as every bertfit output is; texts
are always cut on the right at the run's `max_seq_length` (`truncation_direction` "left" is
refused; TEI's `"truncate": false` refuses a longer input as TEI does).
"""

from __future__ import annotations

import asyncio
import http
import json
import time
import uuid

import numpy as np

from bertfit.data.tasks import MULTI_LABEL, REGRESSION
from bertfit.serve.core import (
    INVALID_ARGUMENT,
    NOT_FOUND,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    ModelCore,
    ServedVersion,
    ServingError,
)

VLLM_API, TEI_API = "/classify", "/predict"  # their `API` label in the request metrics
REGRESSION_LABEL = "value"  # the one "class" of a regression model
_TINY = float(np.finfo(np.float32).tiny)  # log(0) has no JSON
# Special tokens the tokenizer adds: [CLS] text [SEP], or [CLS] text [SEP] pair [SEP].
_SPECIAL_TOKENS = {False: 2, True: 3}


def _invalid(message: str) -> ServingError:
    return ServingError(message, INVALID_ARGUMENT)


def _document(body: bytes) -> dict:
    """The JSON object of a request body."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _invalid(f"the request body is not JSON: {e}") from None
    if not isinstance(document, dict):
        raise _invalid("the request body must be a JSON object")
    return document


async def _scores(
    core: ModelCore, served: ServedVersion, texts: list[str], pairs: list[str] | None, raw: bool
) -> np.ndarray:
    """[rows, classes] scores of `texts` (and `pairs`) through the served version's batcher:
    probabilities, or with `raw` the raw scores (`raw_scores`); a regression model's value."""
    rows = [{"text": text} for text in texts]
    if pairs is not None:
        for row, pair in zip(rows, pairs, strict=True):
            row["text_pair"] = pair
    outputs = await core.predict(served, "", rows)
    task = served.classifier.task
    if task.kind == REGRESSION:
        return np.reshape(outputs["value"], [-1, 1]).astype(np.float32)
    probabilities = outputs["probabilities"]
    return raw_scores(probabilities, task.kind) if raw else probabilities


def raw_scores(probabilities: np.ndarray, kind: str) -> np.ndarray:
    """The scores before the activation, from the probabilities: for multi-label the logits
    (log p / (1 - p)); for single-label the log-probabilities, the logits less their
    log-sum-exp, which softmax maps to the same probabilities (the export keeps no logits).
    Both are the calibrated ones (the run's temperatures divide them).

    >>> def shown(scores):
    ...     return np.round(scores.astype(float), 4).tolist()
    >>> shown(raw_scores(np.array([[0.5, 0.5]], np.float32), "single-label"))
    [[-0.6931, -0.6931]]
    >>> shown(raw_scores(np.array([[0.5, 0.880797]], np.float32), "multi-label"))
    [[0.0, 2.0]]
    """
    p = np.clip(probabilities.astype(np.float64), _TINY, None)
    if kind == MULTI_LABEL:
        return np.log(p / np.clip(1 - p, _TINY, None)).astype(np.float32)
    return np.log(p).astype(np.float32)


def _labels(served: ServedVersion) -> list[str]:
    task = served.classifier.task
    return [REGRESSION_LABEL] if task.kind == REGRESSION else list(task.labels)


async def _token_counts(served: ServedVersion, texts: list[str], pairs: list[str] | None):
    """Tokens per row as the model reads them: the special tokens counted, cut at
    `max_seq_length` (a long-documents model reads every window: not cut)."""
    classifier = served.classifier
    lengths = await asyncio.to_thread(classifier.token_lengths, texts, pairs)
    lengths = np.asarray(lengths, np.int64) + _SPECIAL_TOKENS[pairs is not None]
    most = classifier.metadata.get("max_seq_length")
    if most and classifier.windows is None:
        return np.minimum(lengths, int(most)), lengths
    return lengths, lengths


# ---- vLLM's POST /classify ----


async def vllm_classify(core: ModelCore, body: bytes) -> dict:
    """vLLM's `ClassificationResponse` to a request body (see the module's docstring)."""
    document = _document(body)
    model = document.get("model")
    if model is not None and model != core.model_name:
        raise ServingError(f"The model `{model}` does not exist.", NOT_FOUND)
    if "messages" in document:
        raise _invalid("bertfit serve classifies texts: send them as `input` (no `messages`)")
    texts = _vllm_texts(document.get("input"))
    served = core.find(core.model_name)
    if served.classifier.pairs:
        raise _invalid(
            "this model classifies text pairs, which vLLM's `input` cannot carry: send "
            '[[text, text_pair], ...] to POST /predict (TEI\'s API) as {"inputs": ...}'
        )
    activation = document.get("use_activation")
    if activation not in (None, True, False):
        raise _invalid("`use_activation` must be true, false or null")
    request_id = document.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        request_id = uuid.uuid4().hex
    data, read = [], 0
    if texts:
        scores = await _scores(core, served, texts, None, raw=activation is False)
        counts, _ = await _token_counts(served, texts, None)  # of texts the model took
        labels = _labels(served)
        read = int(counts.sum())
        data = [
            {
                "index": index,
                "label": labels[int(np.argmax(row))],
                "probs": [float(score) for score in row],  # float32 widened, as torch's
                "num_classes": len(row),
            }
            for index, row in enumerate(scores)
        ]
    return {
        "id": f"classify-{request_id}",
        "object": "list",
        "created": int(time.time()),
        "model": core.model_name,
        "data": data,
        "usage": {
            "prompt_tokens": read,
            "total_tokens": read,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }


def _vllm_texts(value) -> list[str]:
    if isinstance(value, str):
        if not value:
            raise _invalid("Input or messages must be provided")  # vLLM's words
        return [value]
    if isinstance(value, list) and all(isinstance(text, str) for text in value):
        return value
    if isinstance(value, list) and all(isinstance(i, int | list) for i in value):
        raise _invalid("`input` holds token ids; bertfit serve takes texts (it tokenizes them)")
    raise _invalid("`input` must be a string or a list of strings")


def vllm_error(error: ServingError) -> tuple[int, dict]:
    """(HTTP status, vLLM's `ErrorResponse`) of a refusal."""
    status = error.http_status
    kind = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}.get(status)
    if kind is None:  # the status's phrase, as vLLM names the rest: "ServiceUnavailableError"
        kind = http.HTTPStatus(status).phrase.title().replace(" ", "") + "Error"
    info = {"message": error.message, "type": kind, "param": None, "code": status}
    return status, {"error": info}


# ---- TEI's POST /predict ----


class TeiError(ServingError):
    """A refusal TEI names with its own `ErrorType` ("Validation", "Empty"...)."""

    def __init__(self, message: str, error_type: str):
        status = _TEI_STATUS[error_type]
        code = RESOURCE_EXHAUSTED if status == 429 else INVALID_ARGUMENT
        super().__init__(message, code, http_status=status)
        self.error_type = error_type


# router/src/http/server.rs `impl From<&ErrorType> for StatusCode`.
_TEI_STATUS = {
    "Unhealthy": 503,
    "Backend": 424,
    "Overloaded": 429,
    "Validation": 422,
    "Tokenizer": 422,
    "Empty": 400,
}
_TEI_TYPE_OF_CODE = {
    INVALID_ARGUMENT: "Validation",
    RESOURCE_EXHAUSTED: "Overloaded",
    UNAVAILABLE: "Unhealthy",
}


async def tei_predict(core: ModelCore, body: bytes) -> list:
    """TEI's `PredictResponse` to a request body (see the module's docstring)."""
    document = _document(body)
    if "inputs" not in document:
        raise TeiError("missing field `inputs`", "Validation")
    single, sequences = _tei_inputs(document["inputs"])
    if not sequences:
        raise TeiError("`inputs` cannot be empty", "Empty")
    if len(sequences) > core.max_request_instances:
        raise TeiError(
            f"batch size {len(sequences)} > maximum allowed batch size "
            f"{core.max_request_instances}",
            "Validation",
        )
    raw, truncate = document.get("raw_scores", False), document.get("truncate")
    if not isinstance(raw, bool) or truncate not in (None, True, False):
        raise TeiError("`raw_scores` and `truncate` must be true or false", "Validation")
    if str(document.get("truncation_direction", "right")).lower() != "right":
        raise TeiError(
            "bertfit cuts texts on the right (the end of a long text is dropped): send "
            '"truncation_direction": "right", or leave it out',
            "Validation",
        )
    served = core.find(core.model_name)
    pairs = served.classifier.pairs
    if any((len(sequence) == 2) != pairs for sequence in sequences):
        wanted = "[text, text_pair] pairs" if pairs else "single texts, not pairs"
        raise TeiError(f"this model classifies {wanted}", "Validation")
    texts = [sequence[0] for sequence in sequences]
    text_pairs = [sequence[1] for sequence in sequences] if pairs else None
    if truncate is False:  # TEI refuses what it would cut (core/src/tokenization.rs)
        await _refuse_long(served, texts, text_pairs)
    scores = await _scores(core, served, texts, text_pairs, raw)
    labels = _labels(served)
    answers = [_ranked(labels, row) for row in scores]
    return answers[0] if single else answers


def _tei_inputs(value) -> tuple[bool, list[list[str]]]:
    """(whether it is one input, its sequences: [text] or [text, text_pair]), as TEI's
    `PredictInput` deserializer reads "a string, a pair of strings [string, string] or a batch
    of mixed strings and pairs [[string], [string, string], ...]"."""
    if isinstance(value, str):
        return True, [[value]]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) > 2:
            raise TeiError(
                f"invalid length {len(value)}, expected a string, a pair of strings [string, "
                "string] or a batch of mixed strings and pairs [[string], [string, string], ...]",
                "Validation",
            )
        return True, [value]
    if isinstance(value, list) and all(
        isinstance(v, list) and len(v) in (1, 2) and all(isinstance(s, str) for s in v)
        for v in value
    ):
        return False, value
    raise TeiError(
        "`inputs` must be a string, a pair of strings [string, string] or a batch of mixed "
        "strings and pairs [[string], [string, string], ...]",
        "Validation",
    )


async def _refuse_long(served: ServedVersion, texts: list[str], pairs: list[str] | None) -> None:
    most = served.classifier.metadata.get("max_seq_length")
    if not most or served.classifier.windows is not None:
        return  # no length known, or a long-documents model: it reads every window
    _, lengths = await _token_counts(served, texts, pairs)
    if lengths.max() > int(most):
        raise TeiError(
            f"Input validation error: `inputs` must have less than {most} tokens. Given: "
            f"{int(lengths.max())}",
            "Validation",
        )


def _ranked(labels: list[str], scores: np.ndarray) -> list[dict]:
    """[{"label", "score"}] highest score first, ties as TEI orders them (sorted up, then
    reversed); each score as its float32's shortest text, as serde writes an f32."""
    ascending = sorted(zip(scores.tolist(), labels, strict=True), key=lambda item: item[0])
    return [
        {"score": float(str(np.float32(score))), "label": label}
        for score, label in reversed(ascending)
    ]


def tei_error(error: ServingError) -> tuple[int, dict]:
    """(HTTP status, TEI's `ErrorResponse`) of a refusal."""
    kind = getattr(error, "error_type", None) or _TEI_TYPE_OF_CODE.get(error.code, "Backend")
    status = error.http_status if error.http_status in (408, 413, 504) else _TEI_STATUS[kind]
    return status, {"error": error.message, "error_type": kind}
