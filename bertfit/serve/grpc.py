"""TensorFlow Serving's gRPC API, from the `tensorflow-serving-api` protos, beside the REST API.

`tensorflow.serving.PredictionService` (`Predict`, `Classify`, `Regress`, `MultiInference`,
`GetModelMetadata`) and `tensorflow.serving.ModelService.GetModelStatus` answer as TF Serving's
model server does (`model_servers/prediction_service_impl.cc`,
`servables/tensorflow/predict_util.cc`, `classifier.cc`, `regressor.cc`, `multi_inference.cc`,
`get_model_metadata_impl.cc`, `get_model_status_impl.cc`): the
same status codes and messages for a wrong model name, version or signature, missing or unknown
inputs and wrong dtypes; `output_filter`; the `model_spec` echoed with the version served;
outputs as typed value fields (`float_val`, `string_val`...), TF Serving's default. Messages
longer than 1024 characters are cut and end in "...TRUNCATED", as there.

The services answer from the `bertfit.serve.core.ModelCore` the REST API answers from, on the
REST server's event loop (`grpc.aio`): requests of both APIs share its batchers and its model.
Classify and Regress run the export's `classify` / `regress` signature (method
`tensorflow/serving/classify|regress`, input `inputs`: serialized `tf.Example`s with a bytes
feature `text`), bertfit's default for them (TF Serving's is `serving_default`); a signature of
another method answers INVALID_ARGUMENT, as TF Serving does.

A client, exactly as with TF Serving:

    import grpc, tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel("127.0.0.1:8500"))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(["a fine film"]))
    probabilities = tf.make_ndarray(stub.Predict(request).outputs["probabilities"])
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2

from bertfit.errors import ConfigError
from bertfit.inference.graph import DEFAULT_SIGNATURE, IdLimits
from bertfit.serve.core import (
    CLASSIFY_METHOD,
    REGRESS_METHOD,
    ModelCore,
    ServedVersion,
    ServingError,
    Signature,
)
from bertfit.serve.security import PERMISSION_DENIED, UNAUTHENTICATED, Access
from bertfit.serve.versions import VersionPolicy

SIGNATURE_DEF = "signature_def"  # the one metadata field TF Serving knows
TENSORFLOW_PLATFORM = "tensorflow"  # model_platform_types.h: the platform of SavedModels
_MESSAGE_LIMIT = 1024  # model_servers/grpc_status_util.cc
# The calls TF Serving records in request_count and request_latency (prediction_service_impl.cc):
# not MultiInference, GetModelMetadata, or ModelService's.
_RECORDED_APIS = ("Predict", "Classify", "Regress")


def _invalid(message: str) -> ServingError:
    return ServingError(message, "INVALID_ARGUMENT")


# ---- the services ----


def _answering(api: str | None = None, reload: bool = False):
    """A servicer method whose `ServingError`s end the call with TF Serving's status code and
    message (cut at 1024 characters, as grpc_status_util.cc does), run within the client's
    deadline (DEADLINE_EXCEEDED past it). With `api` ("Predict"...), a model call: admitted by
    `ModelCore.admit`, and recorded in the request metrics when TF Serving records it. A call
    without the key the server asks for (`bertfit.serve.security.Access`; `reload`: a config
    reload's) ends UNAUTHENTICATED or PERMISSION_DENIED first, saying nothing about the
    model."""

    def wrap(method):
        async def answer(self, request, context):
            authorization = next(
                (v for k, v in context.invocation_metadata() or () if k == "authorization"), None
            )
            access = self.access
            refusal = (
                access.reload_refusal(authorization, context.peer())
                if reload
                else access.refusal(authorization)
            )
            if refusal is not None:
                await context.abort(getattr(grpc.StatusCode, refusal), _REFUSALS[refusal])
            try:
                if api is None:
                    return await method(self, request, context)
                record = (
                    self.core.recorded(_model_name(request), api, "GRPC")
                    if api in _RECORDED_APIS
                    else contextlib.nullcontext()
                )
                with record, self.core.admit():
                    call = method(self, request, context)
                    return await asyncio.wait_for(call, context.time_remaining())
            except asyncio.TimeoutError:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "the request's deadline passed"
                )
            except ServingError as e:
                message = e.message.encode("utf-8", "backslashreplace").decode("utf-8")
                if len(message) > _MESSAGE_LIMIT:
                    message = message[:_MESSAGE_LIMIT] + "...TRUNCATED"
                await context.abort(getattr(grpc.StatusCode, e.code), message)

        answer.__name__ = method.__name__
        answer.__doc__ = method.__doc__
        return answer

    return wrap


_REFUSALS = {
    UNAUTHENTICATED: "Unauthorized",
    PERMISSION_DENIED: "a config reload is taken only from this machine; start the server "
    "with --admin-key to reload it from another one",
}


def _model_name(request) -> str:
    """The model a request names (a MultiInference request: its first task's)."""
    if hasattr(request, "tasks"):
        return request.tasks[0].model_spec.name if request.tasks else ""
    return request.model_spec.name


def _served(core: ModelCore, request) -> ServedVersion:
    """The version a request's model_spec names (server_core.cc ServableRequestFromModelSpec,
    then the servable lookup)."""
    if not request.HasField("model_spec"):
        raise _invalid("Missing ModelSpec")
    spec = request.model_spec
    if not spec.name:
        raise _invalid("ModelSpec has no name specified.")
    choice = spec.WhichOneof("version_choice")
    return core.find(
        spec.name,
        spec.version.value if choice == "version" else None,
        spec.version_label if choice == "version_label" else None,
    )


def _echo_spec(request_spec, served: ServedVersion, response_spec, signature: str | None):
    """The response's model_spec: the name asked, the version served, the signature run."""
    response_spec.name = request_spec.name
    response_spec.version.value = served.version
    if signature is not None:
        response_spec.signature_name = signature


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """`tensorflow.serving.PredictionService` on a `ModelCore`."""

    def __init__(self, core: ModelCore, access: Access | None = None):
        self.core = core
        self.access = access or Access()

    @_answering("Predict")
    async def Predict(self, request, context):  # noqa: N802 (the proto's method names)
        """predict_util.cc RunPredict: signature, inputs, output_filter, then the model."""
        served = _served(self.core, request)
        name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        signature = served.signatures.get(name)
        if signature is None:
            raise ServingError(f'Serving signature key "{name}" not found.', "FAILED_PRECONDITION")
        inputs = input_arrays(request, signature, self.core.max_request_instances, served.limits)
        wanted = output_names(request, signature)
        if len(next(iter(inputs.values()))):
            outputs = await self.core.predict(served, name, _rows(inputs))
        else:  # TF Serving runs the graph on an empty batch: outputs with no rows
            outputs = await self.core.predict_no_rows(served, name, inputs)
        response = predict_pb2.PredictResponse()
        _echo_spec(request.model_spec, served, response.model_spec, name)
        for output in wanted:
            response.outputs[output].CopyFrom(tensor_proto(outputs[output]))
        return response

    @_answering("Classify")
    async def Classify(self, request, context):  # noqa: N802
        """classifier.cc: the classify signature on the request's tf.Examples."""
        served = _served(self.core, request)
        name = self.core.signature(served, request.model_spec.signature_name, CLASSIFY_METHOD)
        results = await self.core.classify(served, name.name, serialized_examples(request.input))
        response = classification_pb2.ClassificationResponse()
        _echo_spec(request.model_spec, served, response.model_spec, name.name)
        _classifications(results, response.result)
        return response

    @_answering("Regress")
    async def Regress(self, request, context):  # noqa: N802
        """regressor.cc: the regress signature on the request's tf.Examples."""
        served = _served(self.core, request)
        name = self.core.signature(served, request.model_spec.signature_name, REGRESS_METHOD)
        values = await self.core.regress(served, name.name, serialized_examples(request.input))
        response = regression_pb2.RegressionResponse()
        _echo_spec(request.model_spec, served, response.model_spec, name.name)
        for value in values:
            response.result.regressions.add(value=value)
        return response

    @_answering("MultiInference")
    async def MultiInference(self, request, context):  # noqa: N802
        """multi_inference.cc: classify and regress tasks of one model on one input."""
        first = request.tasks[0] if request.tasks else inference_pb2.InferenceTask()
        served = _served(self.core, first)
        signatures = [self._task_signature(served, task, first) for task in request.tasks]
        if len(set(signatures)) < len(signatures):
            duplicate = next(n for n in signatures if signatures.count(n) > 1)
            raise _invalid(f"Duplicate evaluation of signature: {duplicate}")
        examples = serialized_examples(request.input)
        response = inference_pb2.MultiInferenceResponse()
        for task, name in zip(request.tasks, signatures, strict=True):
            result = response.results.add()
            if task.method_name == CLASSIFY_METHOD:
                pairs = await self.core.classify(served, name, examples)
                _classifications(pairs, result.classification_result)
            else:
                values = await self.core.regress(served, name, examples)
                for value in values:
                    result.regression_result.regressions.add(value=value)
            _echo_spec(task.model_spec, served, result.model_spec, name)
        return response

    def _task_signature(self, served: ServedVersion, task, first) -> str:
        """The signature a MultiInference task runs, checked as multi_inference.cc does."""
        if not task.model_spec.name:
            raise _invalid("Found ModelSpec with an empty model name.")
        if task.model_spec.name != first.model_spec.name:
            raise _invalid(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        if task.method_name not in (CLASSIFY_METHOD, REGRESS_METHOD):
            raise ServingError(
                f"Unsupported signature method_name: {task.method_name}", "UNIMPLEMENTED"
            )
        name = task.model_spec.signature_name
        if name and name not in served.signatures:
            raise _invalid(f"Requested signature not found in model graph: {name}")
        return self.core.signature(served, name, task.method_name).name

    @_answering()
    async def GetModelMetadata(self, request, context):  # noqa: N802
        """get_model_metadata_impl.cc: the version's SignatureDefMap, packed in an Any."""
        if not request.HasField("model_spec"):
            raise _invalid("Missing ModelSpec")
        if not request.metadata_field:
            raise _invalid("GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != SIGNATURE_DEF:
                raise _invalid(f"Metadata field {field} is not supported")
        served = _served(self.core, request)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _echo_spec(request.model_spec, served, response.model_spec, None)
        signature_map = json_format.ParseDict(
            {"signature_def": served.signature_defs}, get_model_metadata_pb2.SignatureDefMap()
        )
        response.metadata[SIGNATURE_DEF].Pack(signature_map)
        return response


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """`tensorflow.serving.ModelService` on a `ModelCore`: GetModelStatus, and
    HandleReloadConfigRequest for the one model `bertfit serve` serves (its version policy
    and labels; its base path is the --export BASE it polls)."""

    def __init__(self, core: ModelCore, access: Access | None = None):
        self.core = core
        self.access = access or Access()

    @_answering()
    async def GetModelStatus(self, request, context):  # noqa: N802
        """get_model_status_impl.cc: every version, or the one asked."""
        if not request.HasField("model_spec"):
            raise _invalid("Missing ModelSpec")
        spec = request.model_spec
        version = spec.version.value if spec.HasField("version") else None
        status = self.core.model_status(spec.name, version)
        return json_format.ParseDict(status, get_model_status_pb2.GetModelStatusResponse())

    @_answering(reload=True)
    async def HandleReloadConfigRequest(self, request, context):  # noqa: N802
        """model_service_impl.cc: ServerCore::ReloadConfig (its checks in its order: the
        config, each model's absolute base_path, its platform, then the labels against the
        versions AVAILABLE now), then its status in the response (and as the call's status
        when it failed). A refused reload changes nothing."""
        core = self.core
        if request.config.WhichOneof("config") != "model_config_list":
            raise _invalid(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                "ModelConfigList is currently supported"
            )
        models = list(request.config.model_config_list.config)
        names = [model.name for model in models]
        if names != [core.model_name]:
            raise _invalid(
                f"bertfit serve serves one model, {core.model_name!r}; the config names "
                f"{names}: list that one model (to serve others, start a server for each)"
            )
        model = models[0]
        if _is_relative(model.base_path):  # server_core.cc ValidateModelConfigList
            raise _invalid(
                f"Expected model {model.name} to have an absolute path or URI; got "
                f"base_path()={model.base_path}"
            )
        platform = _platform(model)
        if platform != TENSORFLOW_PLATFORM:  # ValidateNoModelsChangePlatforms
            raise _invalid(
                f"Illegal to change a model's platform. For model {model.name} platform was "
                f"{TENSORFLOW_PLATFORM} and new platform requested is {platform}"
            )
        policy = VersionPolicy.from_proto(model.model_version_policy)
        labels = dict(model.version_labels)
        for version in labels.values():  # UpdateModelVersionLabelMap, before any loading
            if version not in core.versions:
                raise ServingError(
                    f"Request to assign label to version {version} of model {model.name}, "
                    "which is not currently available for inference",
                    "FAILED_PRECONDITION",
                )
        manager = core.manager
        if manager is None:
            raise ServingError(
                "this server serves a run directory or one version folder: start it with "
                "--export BASE to change its versions",
                "FAILED_PRECONDITION",
            )
        if Path(model.base_path).resolve() != manager.base.resolve():
            raise ServingError(
                f"the model's base_path is {manager.base}; bertfit serve cannot move it to "
                f"{model.base_path} (start a server there)",
                "FAILED_PRECONDITION",
            )
        await manager.reload(policy, labels)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = 0  # OK
        return response


def _is_relative(uri: str) -> bool:
    """server_core.cc UriIsRelativePath: no `scheme://` (io::ParseURI) and no leading `/`
    (the empty path is relative too)."""
    return not re.match(r"[a-zA-Z][0-9a-zA-Z.]*://", uri) and not uri.startswith("/")


def _platform(model) -> str:
    """A ModelConfig's platform as TF Serving's `GetPlatform` (server_core.cc) reads it:
    `model_platform`, or the deprecated `model_type` (TENSORFLOW only); neither or both set is
    an INVALID_ARGUMENT."""
    if model.model_type != model_server_config_pb2.MODEL_TYPE_UNSPECIFIED:
        if model.model_platform:
            raise _invalid(
                "Illegal setting both ModelServerConfig::model_type (deprecated) and "
                f"ModelServerConfig::model_platform, model name is {model.name}"
            )
        if model.model_type != model_server_config_pb2.TENSORFLOW:
            raise _invalid(
                f"ModelServerConfig::model_type choice {model.model_type} not supported."
            )
        return TENSORFLOW_PLATFORM
    if not model.model_platform:
        raise _invalid(
            "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
            f"ModelServerConfig::model_platform, model name is {model.name}"
        )
    return model.model_platform


def _classifications(results: list[list[tuple[str, float]]], into) -> None:
    """Per example its (label, score) pairs, into a ClassificationResult."""
    for pairs in results:
        classes = into.classifications.add().classes
        for label, score in pairs:
            classes.add(label=label, score=score)


def serialized_examples(request_input) -> list[bytes]:
    """A Classify/Regress `Input` as serialized `tf.Example`s, as TF Serving's
    `InputToSerializedExampleTensor` makes them (the context merged into each example by
    concatenating the serialized protos)."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in request_input.example_list.examples]
    if kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        context = listed.context.SerializeToString()
        return [context + e.SerializeToString() for e in listed.examples]
    return []


# ---- the server ----


def bind(
    host: str,
    port: int,
    max_message_bytes: int,
    max_calls: int | None = None,
    tls: tuple[bytes, bytes] | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server bound to host:port (0: any free port), not started, and the port bound;
    or a `ConfigError` that says why not. Call it in the event loop that will run it. With
    `tls` (PEM certificate chain, private key: `bertfit.serve.security.tls_pair`) it speaks
    TLS.

    A request message over `max_message_bytes` (`--max-request-bytes`, as the REST body's
    bound) is refused by gRPC itself with RESOURCE_EXHAUSTED; TF Serving takes any size a
    protobuf holds (server.cc SetMaxMessageSize), bertfit bounds a request's memory. Past
    `max_calls` calls at once (messages being read too), gRPC answers RESOURCE_EXHAUSTED."""
    server = grpc.aio.server(
        maximum_concurrent_rpcs=max_calls,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 2**31 - 1),
        ],
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            cert, key = tls
            credentials = grpc.ssl_server_credentials([(key, cert)])
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:
        bound = 0
    if not bound:
        raise ConfigError(
            f"cannot listen for gRPC on {address}: the port is in use or the host is not an "
            "address of this machine; pass another --grpc-port, or --grpc-port -1 for no gRPC"
        )
    return server, bound


def add_services(server: grpc.aio.Server, core: ModelCore, access: Access | None = None) -> None:
    """PredictionService and ModelService on `core`, added to `server` before it starts, asking
    for the keys of `access` (default: none)."""
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(core, access), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core, access), server)


# ---- inputs: a PredictRequest's tensors checked as TF Serving checks them ----


def input_arrays(
    request, signature: Signature, max_rows: int, limits: IdLimits | None = None
) -> dict[str, np.ndarray]:
    """The request's inputs as arrays: predict_util.cc's `VerifyRequestInputsSize`, the
    SavedModel's `GetInputValues`, then the session's check of each argument's dtype.

    Each TensorProto's declared shape is checked against `max_rows` rows (and an id row
    against the position table of `limits`) before any array is built: a TensorProto of a
    few bytes can declare 2**27 rows, which TensorFlow would fill with copies of its last
    value."""
    sent, expected = set(request.inputs), set(signature.inputs)
    if len(sent) != len(expected):
        raise _invalid(
            f"input size does not match signature: {len(sent)}!={len(expected)} "
            f"len({_set(sent)}) != len({_set(expected)}). Sent extra: {_set(sent - expected)}. "
            f"Missing but required: {_set(expected - sent)}."
        )
    for alias in sorted(sent - expected):
        raise _invalid(
            f"input tensor alias not found in signature: {alias}. Inputs expected to be in the "
            f"set {_set(expected)}."
        )
    arrays = {}
    for index, name in enumerate(sorted(expected)):
        proto, info = request.inputs[name], signature.inputs[name]
        _check_dtype(proto, info, index)
        _check_declared_shape(proto, info, name, max_rows, limits)
    for name in sorted(expected):
        arrays[name] = _input_array(request.inputs[name], signature.inputs[name], name)
    if len({len(a) for a in arrays.values()}) > 1:
        sizes = ", ".join(f"{n} has {len(a)}" for n, a in arrays.items())
        raise _invalid(f"every input must have the same batch size (dimension 0): {sizes}")
    return arrays


def _check_dtype(proto, info, index: int) -> None:
    expected = tf.as_dtype(info.dtype).as_datatype_enum
    if proto.dtype != expected:
        raise _invalid(
            f"Expects arg[{index}] to be {_type_name(expected)} but {_type_name(proto.dtype)} "
            "is provided"
        )


def _check_declared_shape(proto, info, name: str, max_rows: int, limits: IdLimits | None):
    """The shape a TensorProto declares, checked before its values are read: its rank, its
    rows against `max_rows`, an id row's length against the position table, and no more
    values than the shape holds."""
    dims = [dim.size for dim in proto.tensor_shape.dim]
    if proto.tensor_shape.unknown_rank or len(dims) != len(info.shape):
        raise _invalid(
            f"input {name} must have shape {_shape(info.shape)} (rank {len(info.shape)}), "
            f"got {'an unknown rank' if proto.tensor_shape.unknown_rank else dims}"
        )
    if any(size < 0 for size in dims):
        raise _invalid(f"input {name} declares a negative dimension: {dims}")
    if dims and dims[0] > max_rows:
        raise _invalid(
            f"input {name} declares {dims[0]} rows; at most {max_rows} instances are accepted "
            "in one request (split it, or start the server with a larger "
            "--max-request-instances)"
        )
    longest = limits.max_length if limits is not None else None
    if len(dims) > 1 and dims[1] > (longest or _MAX_ROW_LENGTH):
        raise _invalid(
            f"input {name} declares rows of {dims[1]} ids; the model takes at most {longest} "
            f"per row: truncate the rows to {longest or _MAX_ROW_LENGTH} ids"
        )
    elements = int(np.prod(dims, dtype=np.int64)) if dims else 1
    field = _VALUE_FIELDS.get(proto.dtype)
    sent = len(getattr(proto, field)) if field else 0
    if sent > elements:
        raise _invalid(f"input {name} has {sent} values but its shape {dims} holds {elements}")


_MAX_ROW_LENGTH = 8192  # an id row's bound where the model does not say its position table


def _input_array(proto, info, name: str) -> np.ndarray:
    try:
        return tf.make_ndarray(proto)
    except (TypeError, ValueError) as e:
        raise _invalid(f"input {name}: the TensorProto cannot be read ({e})") from None


def _rows(inputs: dict[str, np.ndarray]) -> list[dict]:
    """One {name: value} per instance, as `ModelCore.predict` takes them: texts as str (bytes
    that are not UTF-8 stay bytes, for the core to refuse), id rows as lists of ints."""

    def value(item):
        if isinstance(item, bytes):
            try:
                return item.decode("utf-8")
            except UnicodeDecodeError:
                return item
        return item.tolist() if isinstance(item, np.ndarray) else item

    size = len(next(iter(inputs.values())))
    return [{name: value(array[i]) for name, array in inputs.items()} for i in range(size)]


def output_names(request, signature: Signature) -> list[str]:
    """`output_filter` checked as predict_util.cc does; every output when it is empty."""
    chosen: list[str] = []
    for alias in request.output_filter:
        if alias not in signature.outputs:
            raise _invalid(
                f"output tensor alias not found in signature: {alias} Outputs expected to be in "
                f"the set {_set(signature.outputs)}."
            )
        if alias in chosen:
            raise _invalid(f"duplicate output tensor alias: {alias}")
        chosen.append(alias)
    return chosen or sorted(signature.outputs)


def _type_name(dtype: int) -> str:
    """TensorFlow's DataTypeString: DT_FLOAT → "float", DT_STRING → "string"."""
    return types_pb2.DataType.Name(dtype).removeprefix("DT_").lower()


def _set(names) -> str:
    return "{" + ",".join(sorted(names)) + "}"


def _shape(shape: tuple) -> str:
    return "[" + ",".join("-1" if d is None else str(d) for d in shape) + "]"


# ---- tensors: TensorProto <-> numpy ----

_VALUE_FIELDS = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_INT32: "int_val",
    types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT8: "int_val",
    types_pb2.DT_UINT8: "int_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_STRING: "string_val",
}


def tensor_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """`array` as TF Serving writes outputs by default (`Tensor::AsProtoField`): its values in
    the dtype's repeated field, not packed in `tensor_content`."""
    text = array.dtype == object or array.dtype.kind in "SU"
    dtype = tf.string if text else tf.as_dtype(array.dtype)
    proto = tensor_pb2.TensorProto(
        dtype=dtype.as_datatype_enum, tensor_shape=tf.TensorShape(array.shape).as_proto()
    )
    values = array.ravel().tolist()
    if dtype == tf.string:
        values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    getattr(proto, _VALUE_FIELDS[dtype.as_datatype_enum]).extend(values)
    return proto
