"""TensorFlow Serving's REST API in JSON: request paths and bodies in, response bodies out.

It follows TF Serving's own code (tensorflow/serving): the paths of
`model_servers/http_rest_api_util.cc` (case-insensitive, as its regexes), the request bodies of
`util/json_tensor.cc` (row format `{"instances": [...]}` and columnar `{"inputs": ...}`, base64
strings as `{"b64": "..."}`, classify/regress `{"examples": [...], "context": {...}}`, anything
after the JSON document ignored), and its response bodies (one output unnamed, several by name;
float32 printed as TF Serving prints it). What bertfit does differently is listed in
docs/serving.md. Everything here raises `bertfit.serve.core.ServingError`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import re
import urllib.parse

import numpy as np
import tensorflow as tf

from bertfit.serve import deep_json
from bertfit.serve.core import ServingError, Signature

# http_rest_api_util.cc kPredictionApiGegex / kModelStatusApiRegex.
_POST_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_GET_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)
REST_PATHS = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)  # http_rest_api_handler.h
_INT64_MAX = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Route:
    """What a request path asks for: `call` is "predict", "classify", "regress", "metadata"
    or "status"."""

    call: str
    model_name: str
    version: int | None = None
    label: str | None = None

    @property
    def api(self) -> str:
        """The API TF Serving's metrics record: the verb of a POST, none for a GET."""
        return "" if self.call in ("status", "metadata") else self.call


def route(method: str, path: str) -> Route:
    """The call a request names, or TF Serving's `ServingError` (http_rest_api_handler.cc
    ProcessRequest: whatever it cannot dispatch is "Malformed request")."""
    malformed = ServingError(f"Malformed request: {method} {path}")
    pattern = {"POST": _POST_PATH, "GET": _GET_PATH}.get(method)
    match = pattern.fullmatch(path) if pattern else None
    if match is None:
        raise malformed
    name, version, label, verb = match.groups()
    name = urllib.parse.unquote(name or "")
    if version and int(version) > _INT64_MAX:
        raise ServingError(f"Failed to convert version: {version} to numeric.")
    version = int(version) if version else None
    label = urllib.parse.unquote(label) if label else None
    if method == "POST":
        if verb not in ("predict", "classify", "regress"):  # matched case-insensitively only
            raise malformed
        return Route(verb, name, version, label)
    if not name:
        raise ServingError("Missing model name in request.")
    call = "metadata" if verb == "metadata" else "status"
    return Route(call, name, version, label)


# ---- request bodies ----


def parse_body(body: bytes) -> dict:
    """The JSON object a request body starts with (json_tensor.cc ParseJson: what follows
    the document is ignored, NaN and Infinity are numbers)."""
    if not body:
        raise ServingError("JSON Parse error: The document is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        message = f"JSON Parse error: Invalid encoding in string. at offset: {e.start}"
        raise ServingError(message) from None
    start = len(text) - len(text.lstrip(" \t\n\r"))
    if start == len(text):
        raise ServingError("JSON Parse error: The document is empty")
    try:
        document, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise ServingError(f"JSON Parse error: {e.msg} at offset: {e.pos}") from None
    except RecursionError:  # deeper than Python's parser goes; TF Serving's has no limit
        try:
            document, _ = deep_json.decode(text, start)
        except deep_json.DeepJSONError as e:
            raise ServingError(f"JSON Parse error: {e.msg} at offset: {e.pos}") from None
    if not isinstance(document, dict):
        raise ServingError(f"JSON Value: {_debug(document)} Is not object")
    return document


def signature_name(document: dict) -> str:
    """The optional "signature_name" ("" when absent); it must be a string when given."""
    name = document.get("signature_name", "")
    if not isinstance(name, str):
        raise ServingError(
            f"JSON Value: {_debug(document)} not formatted correctly. 'signature_name' key "
            "must be a string value."
        )
    return name


def predict_rows(document: dict, signature: Signature) -> tuple[list[dict], bool]:
    """(one {input: value} per instance, whether the request was columnar), from a predict
    request's "instances" or "inputs" (json_tensor.cc FillPredictRequestFromJson)."""
    has_instances, has_inputs = "instances" in document, "inputs" in document
    if has_instances and has_inputs:
        raise ServingError(
            f"JSON Value: {_debug(document)} Not formatted correctly expecting only one of "
            "'inputs' or 'instances' keys to exist "
        )
    if has_instances:
        instances = document["instances"]
        if not isinstance(instances, list):
            raise ServingError(
                f"JSON Value: {_debug(document)} Expecting 'instances' to be an list/array"
            )
        if not instances:
            raise ServingError(f"JSON Value: {_debug(document)} No values in 'instances' array")
        return _instances_to_rows(instances, signature), False
    if has_inputs:
        return _columns_to_rows(document["inputs"], signature), True
    raise ServingError("Missing 'inputs' or 'instances' key")


def _is_b64(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_object(value) -> bool:
    return isinstance(value, dict) and not _is_b64(value)


def _instances_to_rows(instances: list, signature: Signature) -> list[dict]:
    names = list(signature.inputs)
    objects = _is_object(instances[0])
    if not isinstance(instances[0], dict) and len(names) > 1:
        raise ServingError(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    rows = []
    for index, item in enumerate(instances):
        if objects and not _is_object(item):
            raise ServingError(f"Expecting object but got list at item {index} of input list")
        if not objects and _is_object(item):
            raise ServingError(f"Expecting value/list but got object at item {index} of input list")
        if not objects:
            rows.append({names[0]: _value(item, signature, names[0], index)})
            continue
        for key in item:
            if key not in signature.inputs:
                raise ServingError(
                    f"Failed to process element: {index} key: {key} of 'instances' list. "
                    f"Error: JSON object: does not have named input: {key}"
                )
        if set(item) != set(names):
            raise ServingError(
                f"Failed to process element: {index} of 'instances' list. JSON object: "
                f"{_debug(item)} keys must be equal to: {','.join(sorted(names))}"
            )
        rows.append({name: _value(item[name], signature, name, index) for name in names})
    return rows


def _columns_to_rows(inputs, signature: Signature) -> list[dict]:
    names = list(signature.inputs)
    if not _is_object(inputs):
        if len(names) > 1:
            raise ServingError(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        inputs = {names[0]: inputs}
    for name in names:
        if name not in inputs:
            raise ServingError(f"Missing named input: {name} in 'inputs' object.")
    unknown = sorted(set(inputs) - set(names))
    if unknown:  # TF Serving ignores them; bertfit refuses a misspelled input (docs/serving.md)
        raise ServingError(f'"inputs" has unknown inputs {unknown}; expected {", ".join(names)}')
    columns = [inputs[name] for name in names]
    for name, column in zip(names, columns, strict=True):
        if not isinstance(column, list):
            raise ServingError(f"input {name!r} must be a list, one value per instance")
    if len({len(c) for c in columns}) != 1:
        raise ServingError("every input must have the same number of values (the batch size)")
    return [
        {name: _value(v, signature, name, index) for name, v in zip(names, values, strict=True)}
        for index, values in enumerate(zip(*columns, strict=True))
    ]


def _value(value, signature: Signature, name: str, index: int):
    """A JSON value for input `name`: base64 objects decoded to bytes for string inputs."""
    if signature.inputs[name].dtype == "string" and _is_b64(value):
        return decode_b64(value["b64"])
    if isinstance(value, dict):
        raise ServingError(
            f"instance {index}: input {name!r}: JSON Value: {_debug(value)} Type: Object is "
            f"not of expected type: {signature.inputs[name].dtype}"
        )
    return value


def decode_b64(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not (absl::Base64Unescape)."""
    try:
        text = text.strip().replace("-", "+").replace("_", "/")
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ServingError("Unable to base64 decode") from None


def examples(document: dict, method: str) -> list[bytes]:
    """The serialized tf.Examples of a classify/regress request (json_tensor.cc
    FillClassifyRegressRequestFromJson), each merged with the request's "context"."""
    context = _example(document["context"]) if "context" in document else None
    items = document.get("examples")
    if items is None:
        raise ServingError(
            f"JSON Value: {_debug(document)} When method is classify, key 'examples' is "
            "expected and was not found"
        )
    if not isinstance(items, list):
        raise ServingError(
            f"JSON Value: {_debug(document)} Expecting 'examples' value to be an list/array"
        )
    if not items:
        raise ServingError(f"JSON Value: {_debug(document)} 'examples' value is an empty array")
    serialized = []
    for item in items:
        example = _example(item)
        if context is not None:  # ExampleListWithContext: the context's features, then its own
            merged = tf.train.Example()
            merged.CopyFrom(context)
            merged.MergeFrom(example)
            example = merged
        serialized.append(example.SerializeToString())
    return serialized


def _example(value) -> tf.train.Example:
    if not isinstance(value, dict):
        raise ServingError(f"Example must be JSON object but got JSON {_json_type(value)}")
    example = tf.train.Example()
    for name, content in value.items():
        feature = example.features.feature[name]
        for item in content if isinstance(content, list) else [content]:
            _add_to_feature(item, name, feature)
    return example


def _add_to_feature(value, name: str, feature) -> None:
    kind = feature.WhichOneof("kind")

    def expect(wanted: str):
        if kind not in (None, wanted):
            expected = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}
            raise ServingError(
                f"Unexpected element type in feature: {name} expecting type: {expected[kind]}"
            )

    if isinstance(value, str) or _is_b64(value):
        expect("bytes_list")
        data = decode_b64(value["b64"]) if isinstance(value, dict) else value
        if isinstance(data, str):
            try:
                data = data.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ServingError(
                    f"Feature: {name} has a lone surrogate {data[e.start]!a}; send the text as "
                    "valid UTF-8"
                ) from None
        feature.bytes_list.value.append(data)
    elif isinstance(value, bool) or (isinstance(value, int) and -(2**63) <= value <= _INT64_MAX):
        expect("int64_list")
        feature.int64_list.value.append(int(value))
    elif isinstance(value, int):
        raise ServingError(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
    elif isinstance(value, float):
        expect("float_list")
        feature.float_list.value.append(value)
    else:
        raise ServingError(
            f"Feature: {name} has element with unexpected JSON type: {_json_type(value)}"
        )


# ---- response bodies ----


def predict_body(outputs: dict[str, np.ndarray], columnar: bool) -> str:
    """`{"predictions": [...]}` (row format) or `{"outputs": ...}` (columnar), outputs sorted
    by name; a lone output is written without its name (json_tensor.cc MakeJsonFromTensors)."""
    names = sorted(outputs)
    if columnar:
        if len(names) == 1:
            return _object({"outputs": _Raw(_tensor(outputs[names[0]], names[0]))})
        columns = {name: _Raw(_tensor(outputs[name], name)) for name in names}
        return _object({"outputs": _Raw(_object(columns))})
    size = len(outputs[names[0]])
    rows = []
    for i in range(size):
        if len(names) == 1:
            rows.append(_tensor(outputs[names[0]][i], names[0]))
        else:
            rows.append(_object({n: _Raw(_tensor(outputs[n][i], n)) for n in names}))
    return _object({"predictions": _Raw("[" + ", ".join(rows) + "]")})


def classify_body(results: list[list[tuple[str, float]]]) -> str:
    """`{"results": [[["label", score], ...], ...]}` (MakeJsonFromClassificationResult)."""
    rows = [
        "["
        + ", ".join(f"[{json.dumps(label)}, {float32_text(score)}]" for label, score in row)
        + "]"
        for row in results
    ]
    return _object({"results": _Raw("[" + ", ".join(rows) + "]")})


def regress_body(values: list[float]) -> str:
    """`{"results": [value, ...]}` (MakeJsonFromRegressionResult)."""
    return _object({"results": _Raw("[" + ", ".join(float32_text(v) for v in values) + "]")})


def json_body(value: dict) -> str:
    """A status or metadata answer (protobuf's JSON, printed with whitespace as TF Serving
    does)."""
    return json.dumps(value, indent=1, ensure_ascii=False)


def error_body(message: str) -> str:
    """TF Serving's error body. Messages quote the request, which may hold lone surrogates:
    they are escaped (\\ud800) so that the body is UTF-8."""
    return json.dumps({"error": message.encode("utf-8", "backslashreplace").decode("utf-8")})


def float32_text(value: float) -> str:
    """A float32 as TF Serving prints it (json_tensor.cc WriteDecimal): six significant
    digits when they read back as the same float32, else nine; ".0" after a whole number;
    NaN, Infinity, -Infinity.

    Examples:
    >>> float32_text(0.2), float32_text(1.0), float32_text(0.7310586), float32_text(1e-5)
    ('0.2', '1.0', '0.731058598', '1e-05')
    """
    value = np.float32(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    text = f"{float(value):g}"
    if np.float32(float(text)) != value:
        text = f"{float(value):.9g}"
    if "." not in text and "e" not in text:
        text += ".0"
    return text


class _Raw(str):
    """JSON text written as it is."""


def _object(items: dict) -> str:
    fields = (
        f"{json.dumps(k)}: {v if isinstance(v, _Raw) else json.dumps(v)}" for k, v in items.items()
    )
    return "{" + ", ".join(fields) + "}"


def _tensor(value, name: str) -> str:
    """A (batch-free) value of an output tensor in JSON; strings of outputs named `*_bytes`
    as {"b64": ...} (json_tensor.cc IsNamedTensorBytes)."""
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return "[" + ", ".join(_tensor(v, name) for v in value) + "]"
    if isinstance(value, np.ndarray):
        value = value[()]
    if isinstance(value, bytes):
        if name.endswith("_bytes"):
            return json.dumps({"b64": base64.b64encode(value).decode("ascii")})
        return json.dumps(value.decode("utf-8", "replace"), ensure_ascii=False)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (np.floating, float)):
        return float32_text(value)
    if isinstance(value, (np.bool_, bool)):
        return "true" if value else "false"
    return str(int(value))


def _debug(value) -> str:
    """A JSON value as TF Serving quotes it in an error (JsonValueToDebugString)."""
    return deep_json.excerpt(value, 1000)


def _json_type(value) -> str:
    for kind, name in [(bool, "Boolean"), (dict, "Object"), (list, "Array"), (str, "String")]:
        if isinstance(value, kind):
            return name
    return "Null" if value is None else "Number"
