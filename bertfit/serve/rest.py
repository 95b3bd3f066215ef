"""TensorFlow Serving's REST API, as its documentation (g3doc/api_rest.md) describes it.

Requests in row format (`{"instances": [...]}`) are answered `{"predictions": [...]}`, one
object per instance with every output by name; requests in columnar format
(`{"inputs": ...}`) are answered `{"outputs": {name: [...]}}`. Every mistake in a request is a
`RequestError` whose message goes back as TF Serving's `{"error": "..."}` body with HTTP 400
(404 for an unknown model or version).

Every instance is checked here, before it can join a batch with other requests' instances:
texts must be valid Unicode, ids must fit the model (`bertfit.inference.graph.IdLimits`: the
vocabulary, the type vocabulary, the position table), rows must not be empty or ragged. A fault
is named by its instance index and says what was expected.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from bertfit.inference.graph import IdLimits
from bertfit.inference.predictor import text_problem
from bertfit.model.inputs import MASK, TYPE_IDS, WORD_IDS

PREDICT_METHOD = "tensorflow/serving/predict"
_DTYPES = {"string": "DT_STRING", "float32": "DT_FLOAT", "int32": "DT_INT32", "int64": "DT_INT64"}
_INT_BITS = {"int32": 32, "int64": 64}


class RequestError(Exception):
    """A request TF Serving would refuse; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Signature:
    """One signature of the served model: its input and output names, dtypes and shapes."""

    name: str
    inputs: dict[str, tuple[str, tuple]]  # name → (dtype, shape with None for any)
    outputs: dict[str, tuple[str, tuple]]

    @classmethod
    def of(cls, name: str, function) -> Signature:
        """From a concrete function (a SavedModel signature)."""

        def spec(t):
            return (t.dtype.name, tuple(t.shape.as_list()))

        args, kwargs = function.structured_input_signature
        inputs = {k: spec(v) for k, v in kwargs.items()} or {t.name: spec(t) for t in args}
        outputs = {k: spec(v) for k, v in function.structured_outputs.items()}
        return cls(name, inputs, outputs)

    def metadata(self) -> dict:
        """The SignatureDef as TF Serving's metadata API writes it."""

        def tensors(specs, prefix):
            return {
                name: {
                    "dtype": _DTYPES.get(dtype, dtype),
                    "tensor_shape": {
                        "dim": [{"size": str(-1 if d is None else d), "name": ""} for d in shape],
                        "unknown_rank": False,
                    },
                    "name": f"{prefix}_{name}:0",
                }
                for name, (dtype, shape) in specs.items()
            }

        return {
            "inputs": tensors(self.inputs, self.name),
            "outputs": tensors(self.outputs, "StatefulCall"),
            "method_name": PREDICT_METHOD,
        }


@dataclasses.dataclass
class PredictRequest:
    """A parsed predict request: the signature and one dict of input values per row."""

    signature: Signature
    rows: list[dict]
    columnar: bool


def parse_predict(
    body: bytes,
    signatures: dict[str, Signature],
    max_rows: int,
    limits: IdLimits | None = None,
) -> PredictRequest:
    """Validates a predict request body against the signatures and the model's id `limits`;
    every fault is a `RequestError` with TF Serving's wording where it has one."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise RequestError(f"JSON Parse error: {e}") from None
    if not isinstance(request, dict):
        raise RequestError(
            'JSON Value: the request body must be a JSON object with "instances" or "inputs".'
        )
    name = request.get("signature_name") or "serving_default"
    if not isinstance(name, str) or name not in signatures:
        raise RequestError(f'Serving signature name: "{name}" not found in signature def')
    signature = signatures[name]
    if ("instances" in request) == ("inputs" in request):
        raise RequestError(
            "Missing 'inputs' or 'instances' key"
            if "inputs" not in request
            else "JSON object: does not have named input: instances and inputs cannot both be given"
        )
    columnar = "inputs" in request
    rows = (
        _columns_to_rows(request["inputs"], signature)
        if columnar
        else _instances_to_rows(request["instances"], signature)
    )
    if not rows:
        raise RequestError("the request has no instances")
    if len(rows) > max_rows:
        raise RequestError(
            f"the request has {len(rows)} instances; at most {max_rows} are "
            "accepted in one request (split it, or start the server with a "
            "larger --max-request-instances)"
        )
    limits = limits or IdLimits()
    rows = [_checked(row, signature, i, limits) for i, row in enumerate(rows)]
    _check_not_ragged(rows, signature)
    return PredictRequest(signature, rows, columnar)


def _instances_to_rows(instances, signature: Signature) -> list[dict]:
    if not isinstance(instances, list):
        raise RequestError('JSON Value: "instances" must be a list, one item per instance')
    names = list(signature.inputs)
    if len(names) == 1:
        (only,) = names
        return [
            item if isinstance(item, dict) and set(item) == {only} else {only: item}
            for item in instances
        ]
    for i, item in enumerate(instances):
        if not isinstance(item, dict):
            raise RequestError(
                f"instance {i}: expected an object with the inputs "
                f"{', '.join(names)}, got {json.dumps(item)[:60]}"
            )
    return instances


def _columns_to_rows(inputs, signature: Signature) -> list[dict]:
    names = list(signature.inputs)
    if len(names) == 1 and not (isinstance(inputs, dict) and names[0] in inputs):
        inputs = {names[0]: inputs}  # one input: the value itself, as TF Serving allows
    if not isinstance(inputs, dict):
        raise RequestError(f'"inputs" must be an object with the inputs {", ".join(names)}')
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise RequestError(f'"inputs" has unknown inputs {unknown}; expected {", ".join(names)}')
    columns = [inputs.get(name) for name in names]
    for name, column in zip(names, columns, strict=True):
        if not isinstance(column, list):
            raise RequestError(f"input {name!r} must be a list, one value per instance")
    if len({len(c) for c in columns}) != 1:
        raise RequestError("every input must have the same number of values (the batch size)")
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _checked(row: dict, signature: Signature, index: int, limits: IdLimits) -> dict:
    missing = set(signature.inputs) - set(row)
    extra = set(row) - set(signature.inputs)
    if missing or extra:
        raise RequestError(
            f"instance {index}: expected the inputs "
            f"{', '.join(signature.inputs)}; missing {sorted(missing)}, "
            f"unknown {sorted(extra)}"
        )
    for name, (dtype, shape) in signature.inputs.items():
        value, where = row[name], f"instance {index}: input {name!r}"
        if dtype == "string":
            if not isinstance(value, str):
                raise RequestError(f"{where} must be a string, got {json.dumps(value)[:60]}")
            problem = text_problem(value)
            if problem is not None:
                raise RequestError(f"{where} {problem}; send the text as valid UTF-8")
        elif dtype in _INT_BITS:
            _check_ids(value, where, name, dtype, shape, limits)
    _check_lengths(row, signature, index, limits)
    return row


def _check_ids(value, where: str, name: str, dtype: str, shape: tuple, limits: IdLimits) -> None:
    """One instance's row of integer ids: a non-empty list of integers in the input's range."""
    if not (isinstance(value, list) and all(type(v) is int for v in value)):
        raise RequestError(
            f"{where} must be a list of integers (one row of shape {list(shape[1:])}), "
            f"got {json.dumps(value)[:60]}"
        )
    if not value:
        raise RequestError(f"{where} is empty; every row needs at least one id")
    low, high, expected = _id_range(name, dtype, limits)
    if low <= min(value) and max(value) < high:
        return
    position, bad = next((i, v) for i, v in enumerate(value) if not low <= v < high)
    raise RequestError(f"{where} has {bad} at position {position}; {expected}")


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
        name: len(row[name]) for name, (dtype, _) in signature.inputs.items() if dtype in _INT_BITS
    }
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise RequestError(
            f"instance {index}: {listed} values; every input of an instance must have the "
            "same length (one value per token)"
        )
    longest = limits.max_length
    if lengths and longest is not None and max(lengths.values()) > longest:
        raise RequestError(
            f"instance {index}: {max(lengths.values())} ids; the model takes at most "
            f"{longest} per row (its position table): truncate the row to {longest} ids"
        )


def _check_not_ragged(rows: list[dict], signature: Signature) -> None:
    """The instances of one request form one [batch, seq] tensor: their rows have one length."""
    names = [name for name, (dtype, _) in signature.inputs.items() if dtype in _INT_BITS]
    if not names:
        return
    first = len(rows[0][names[0]])
    for index, row in enumerate(rows):
        if len(row[names[0]]) != first:
            raise RequestError(
                f"instance {index} has {len(row[names[0]])} ids but instance 0 has {first}; "
                "every instance of a request must have the same length: pad the shorter rows "
                "(with input_mask 0) or send them in separate requests"
            )


def format_predict(request: PredictRequest, outputs: list[dict]) -> dict:
    """`{"predictions": [...]}` (row format) or `{"outputs": {...}}` (columnar)."""
    rows = [{k: _json_value(v) for k, v in row.items()} for row in outputs]
    if request.columnar:
        return {"outputs": {name: [row[name] for row in rows] for name in rows[0]}}
    return {"predictions": rows}


def _json_value(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def model_status(version: str) -> dict:
    return {
        "model_version_status": [
            {
                "version": version,
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }


def model_metadata(name: str, version: str, signatures: dict[str, Signature]) -> dict:
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version},
        "metadata": {
            "signature_def": {
                "signature_def": {n: s.metadata() for n, s in signatures.items()},
                "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
            }
        },
    }
