"""TensorFlow Serving's REST API, as its documentation (g3doc/api_rest.md) describes it.

Requests in row format (`{"instances": [...]}`) are answered `{"predictions": [...]}`, one
object per instance with every output by name; requests in columnar format
(`{"inputs": ...}`) are answered `{"outputs": {name: [...]}}`. Every mistake in a request is a
`RequestError` whose message goes back as TF Serving's `{"error": "..."}` body with HTTP 400
(404 for an unknown model or version).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

PREDICT_METHOD = "tensorflow/serving/predict"
_DTYPES = {"string": "DT_STRING", "float32": "DT_FLOAT", "int32": "DT_INT32", "int64": "DT_INT64"}


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


def parse_predict(body: bytes, signatures: dict[str, Signature], max_rows: int) -> PredictRequest:
    """Validates a predict request body against the signatures; every fault is a
    `RequestError` with TF Serving's wording where it has one."""
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
    return PredictRequest(
        signature, [_checked(row, signature, i) for i, row in enumerate(rows)], columnar
    )


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
    if len(names) == 1 and not (isinstance(inputs, dict) and set(inputs) == {names[0]}):
        inputs = {names[0]: inputs}  # one input: the value itself, as TF Serving allows
    if not isinstance(inputs, dict):
        raise RequestError(f'"inputs" must be an object with the inputs {", ".join(names)}')
    columns = [inputs.get(name) for name in names]
    for name, column in zip(names, columns, strict=True):
        if not isinstance(column, list):
            raise RequestError(f"input {name!r} must be a list, one value per instance")
    if len({len(c) for c in columns}) != 1:
        raise RequestError("every input must have the same number of values (the batch size)")
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _checked(row: dict, signature: Signature, index: int) -> dict:
    missing = set(signature.inputs) - set(row)
    extra = set(row) - set(signature.inputs)
    if missing or extra:
        raise RequestError(
            f"instance {index}: expected the inputs "
            f"{', '.join(signature.inputs)}; missing {sorted(missing)}, "
            f"unknown {sorted(extra)}"
        )
    for name, (dtype, shape) in signature.inputs.items():
        value = row[name]
        if dtype == "string" and not isinstance(value, str):
            raise RequestError(
                f"instance {index}: input {name!r} must be a string, got {json.dumps(value)[:60]}"
            )
        if dtype.startswith("int") and not (
            isinstance(value, list)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise RequestError(
                f"instance {index}: input {name!r} must be a list of integers "
                f"(one row of shape {list(shape[1:])})"
            )
    return row


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
