"""`bertfit serve`'s gRPC API driven with TF Serving's own client stubs (`tensorflow-serving-api`),
as a TF Serving client drives it: the same numbers as the REST API, TF Serving's status codes and
messages for a wrong model, version, signature, input or dtype.

The server is the one `bertfit serve` runs: a `ModelServer` on an export of the tiny trained run,
its REST app and the gRPC server on one event loop (in a thread here), gRPC bound to port 0."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import socket
import threading
import time
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from bertfit.cli import main
from bertfit.export.serving import export_classifier
from bertfit.inference.predictor import export_version_dir, load_classifier
from bertfit.serve import grpc as grpc_api
from bertfit.serve.app import ModelServer
from bertfit.serve.core import ServedVersion
from tests.serve import prometheus_text
from tests.serve.asgi import call, exchange
from tests.serve.conftest import PAIR_TEXTS, lines_until, start_serve

TEXTS = ["a fine, moving film", "dull and far too long", "it was fine"]


class LiveServer:
    """A `ModelServer`'s REST app and gRPC server, started together by the app's lifespan on an
    event loop in a thread, as `bertfit serve` runs them; gRPC bound to any free port."""

    def __init__(self, server: ModelServer):
        self.server = server
        self.core = server.core
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),))
        self.thread.start()
        assert self._ready.wait(60), "the servers did not start"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.predictions = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)

    async def _main(self):
        self._stop = asyncio.Event()
        grpc_server, self.grpc_port = grpc_api.bind("127.0.0.1", 0, self.server.max_body_bytes)
        self.app = self.server.app(grpc_server)
        async with self.app.router.lifespan_context(self.app):
            self._ready.set()
            await self._stop.wait()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def rest(self, path: str, body: dict | None = None) -> tuple[int, object]:
        return self.run(call(self.app, path, body))

    def close(self):
        self.channel.close()
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(30)


def _serve(root, name="sst") -> LiveServer:
    """The export at `root` served as model `name` version 1 (label "stable")."""
    version = export_version_dir(root)
    served = ServedVersion(1, load_classifier(root), max_wait=0.02, saved_model_dir=version)
    return LiveServer(ModelServer(None, name, versions=[served], version_labels={"stable": 1}))


@pytest.fixture(scope="module")
def live(trained_run, tmp_path_factory):
    _, result = trained_run
    root = tmp_path_factory.mktemp("export")
    export_classifier(load_classifier(result.run_dir), root)
    live = _serve(root)
    yield live
    live.close()


def _predict_request(texts=TEXTS, name="sst", **spec) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    for field, value in spec.items():
        if field == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, field, value)
    if texts is not None:
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts))
    return request


def _error(call, request) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=60)
    return raised.value.code(), raised.value.details()


def _rest(live: LiveServer, path: str, body: dict) -> dict:
    status, answer = live.rest(path, body)
    assert status == 200, answer
    return answer


def test_predict_gives_the_numbers_rest_and_bertfit_predict_give(live, trained_run):
    response = live.predictions.Predict(_predict_request(), timeout=60)
    probabilities = tf.make_ndarray(response.outputs["probabilities"])
    assert probabilities.dtype == np.float32 and probabilities.shape == (3, 2)
    rest = _rest(live, "/v1/models/sst:predict", {"instances": TEXTS})["predictions"]
    rest_probabilities = np.array([row["probabilities"] for row in rest], np.float32)
    np.testing.assert_array_equal(probabilities, rest_probabilities)  # float32 text, exact
    labels = [label.decode() for label in tf.make_ndarray(response.outputs["label"])]
    assert labels == [row["label"] for row in rest]
    ids = tf.make_ndarray(response.outputs["label_id"])
    assert ids.tolist() == [row["label_id"] for row in rest]
    expected = load_classifier(trained_run[1].run_dir).outputs(TEXTS)  # bertfit predict's
    np.testing.assert_allclose(probabilities, expected["probabilities"], rtol=1e-5, atol=1e-6)
    # TF Serving writes outputs as typed values (Tensor::AsProtoField), not tensor_content.
    assert len(response.outputs["probabilities"].float_val) == 6
    assert response.outputs["probabilities"].tensor_content == b""
    assert response.model_spec.name == "sst"
    assert response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"


def test_a_request_over_grpcs_default_4_mb_is_read_as_tf_serving_reads_it(live):
    request = _predict_request(texts=None)
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(np.zeros(1_300_000, np.float32)))
    assert request.ByteSize() > 5_000_000
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(f"127.0.0.1:{live.grpc_port}", options=options) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        # Read and checked (not RESOURCE_EXHAUSTED at gRPC's default 4 MB limit).
        assert _error(stub.Predict, request) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expects arg[0] to be string but float is provided",
        )


def test_a_tensor_declaring_2_27_rows_is_refused_before_it_is_built(live):
    # 33 bytes on the wire; TensorFlow would fill 2**27 rows with copies of "a" (20 GB).
    request = _predict_request(texts=None)
    request.inputs["text"].dtype = tf.string.as_datatype_enum
    request.inputs["text"].tensor_shape.dim.add(size=2**27)
    request.inputs["text"].string_val.append(b"a")
    assert request.ByteSize() < 40
    started = time.monotonic()
    code, message = _error(live.predictions.Predict, request)
    assert time.monotonic() - started < 2
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message == (
        "input text declares 134217728 rows; at most 4096 instances are accepted in one "
        "request (split it, or start the server with a larger --max-request-instances)"
    )
    # An id row longer than the position table (64 here), declared as 2**30 ids.
    request = _predict_request(signature_name="classify_ids", texts=None)
    for name in ("input_word_ids", "input_mask", "input_type_ids"):
        proto = request.inputs[name]
        proto.dtype = tf.int32.as_datatype_enum
        proto.tensor_shape.dim.add(size=1)
        proto.tensor_shape.dim.add(size=2**30)
        proto.int_val.append(1)
    code, message = _error(live.predictions.Predict, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "declares rows of 1073741824 ids; the model takes at most 64 per row" in message
    # More values than the shape holds, and a negative dimension.
    request = _predict_request(texts=None)
    request.inputs["text"].dtype = tf.string.as_datatype_enum
    request.inputs["text"].tensor_shape.dim.add(size=1)
    request.inputs["text"].string_val.extend([b"a", b"b"])
    assert _error(live.predictions.Predict, request)[1] == (
        "input text has 2 values but its shape [1] holds 1"
    )
    request.inputs["text"].tensor_shape.dim[0].size = -5
    assert "negative dimension" in _error(live.predictions.Predict, request)[1]
    assert len(live.predictions.Predict(_predict_request(), timeout=60).outputs) == 3


@pytest.mark.slow
def test_a_message_over_max_request_bytes_is_resource_exhausted(trained_run):
    served = ServedVersion(1, load_classifier(trained_run[1].run_dir))
    small = LiveServer(ModelServer(None, "sst", versions=[served], max_body_bytes=1000))
    try:
        code, message = _error(small.predictions.Predict, _predict_request(["a" * 2000]))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in message
        assert small.predictions.Predict(_predict_request(["fine"]), timeout=60).outputs
    finally:
        small.close()


def test_a_version_label_names_its_version(live):
    response = live.predictions.Predict(_predict_request(version_label="stable"), timeout=60)
    assert response.model_spec.version.value == 1
    assert len(response.outputs["probabilities"].float_val) == 6


def test_an_empty_batch_gets_outputs_with_no_rows(live):
    response = live.predictions.Predict(_predict_request(texts=np.array([], object)), timeout=60)
    assert tf.make_ndarray(response.outputs["probabilities"]).shape == (0, 2)
    assert tf.make_ndarray(response.outputs["label"]).shape == (0,)


def test_grpc_and_rest_requests_share_one_model_call(live):
    batcher = live.core.latest.batcher

    async def both():
        before = batcher.batches
        grpc_call = asyncio.to_thread(live.predictions.Predict, _predict_request(), timeout=60)
        rest_call = call(live.app, "/v1/models/sst:predict", {"instances": ["a fine film"]})
        response, (status, rest) = await asyncio.gather(grpc_call, rest_call)
        return batcher.batches - before, response, status, rest

    calls, response, status, rest = live.run(both())
    assert len(response.outputs["probabilities"].float_val) == 6
    assert status == 200 and len(rest["predictions"]) == 1
    assert calls == 1  # within max_wait of each other: one model call for both


def test_output_filter_and_the_ids_signature(live):
    request = _predict_request(signature_name="classify_ids", texts=None)
    ids = [[2, 5, 7, 3], [2, 9, 3, 0]]
    request.inputs["input_word_ids"].CopyFrom(tf.make_tensor_proto(ids, tf.int32))
    request.inputs["input_mask"].CopyFrom(tf.make_tensor_proto([[1, 1, 1, 1], [1, 1, 1, 0]]))
    request.inputs["input_type_ids"].CopyFrom(tf.make_tensor_proto(np.zeros((2, 4), np.int32)))
    request.output_filter.append("probabilities")
    response = live.predictions.Predict(request, timeout=60)
    assert list(response.outputs) == ["probabilities"]
    assert response.model_spec.signature_name == "classify_ids"
    rows = [
        {"input_word_ids": w, "input_mask": m, "input_type_ids": [0] * 4}
        for w, m in zip(ids, [[1, 1, 1, 1], [1, 1, 1, 0]], strict=True)
    ]
    body = {"signature_name": "classify_ids", "instances": rows}
    rest = _rest(live, "/v1/models/sst:predict", body)["predictions"]
    np.testing.assert_array_equal(
        tf.make_ndarray(response.outputs["probabilities"]),
        np.array([row["probabilities"] for row in rest], np.float32),
    )


def test_model_status_is_tf_servings(live):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "sst"
    response = live.models.GetModelStatus(request, timeout=60)
    (status,) = response.model_version_status
    assert status.version == 1
    assert status.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert (status.status.error_code, status.status.error_message) == (0, "")
    request.model_spec.version.value = 2
    assert _error(live.models.GetModelStatus, request) == (
        grpc.StatusCode.NOT_FOUND,
        "Could not find version 2 of model sst",
    )
    request.model_spec.name = "other"
    request.model_spec.ClearField("version")
    assert _error(live.models.GetModelStatus, request) == (
        grpc.StatusCode.NOT_FOUND,
        "Could not find any versions of model other",
    )
    assert _error(live.models.GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Missing ModelSpec",
    )


def test_metadata_holds_the_exports_own_signature_defs(live):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "sst"
    request.metadata_field.append("signature_def")
    response = live.predictions.GetModelMetadata(request, timeout=60)
    assert (response.model_spec.name, response.model_spec.version.value) == ("sst", 1)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signatures)
    default = signatures.signature_def["serving_default"]
    assert default.method_name == "tensorflow/serving/predict"
    assert default.inputs["text"].dtype == tf.string.as_datatype_enum
    assert default.inputs["text"].name == "serving_default_text:0"  # the SavedModel's tensor
    assert set(default.outputs) == {"probabilities", "label", "label_id"}
    assert "classify_ids" in signatures.signature_def
    request.metadata_field[0] = "graph"
    assert _error(live.predictions.GetModelMetadata, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Metadata field graph is not supported",
    )
    request.ClearField("metadata_field")
    assert _error(live.predictions.GetModelMetadata, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "GetModelMetadataRequest must specify at least one metadata_field",
    )


@pytest.mark.parametrize(
    "spec, code, message",
    [
        ({"name": "other"}, "NOT_FOUND", "Servable not found for request: Latest(other)"),
        ({"version": 7}, "NOT_FOUND", "Servable not found for request: Specific(sst, 7)"),
        ({"name": ""}, "INVALID_ARGUMENT", "ModelSpec has no name specified."),
        (
            {"signature_name": "nope"},
            "FAILED_PRECONDITION",
            'Serving signature key "nope" not found.',
        ),
        (
            {"version_label": "canary"},
            "INVALID_ARGUMENT",
            "Unrecognized servable version label: canary",
        ),
        (
            {"signature_name": "x" * 2000},
            "FAILED_PRECONDITION",
            ('Serving signature key "' + "x" * 2000)[:1024] + "...TRUNCATED",  # grpc_status_util
        ),
    ],
)
def test_a_wrong_model_version_or_signature_gets_tf_servings_status(live, spec, code, message):
    request = _predict_request(**spec)
    assert _error(live.predictions.Predict, request) == (getattr(grpc.StatusCode, code), message)


def test_wrong_inputs_get_tf_servings_status(live):
    request = _predict_request()
    request.inputs["text_pair"].CopyFrom(tf.make_tensor_proto(TEXTS))
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "input size does not match signature: 2!=1 len({text,text_pair}) != len({text}). "
        "Sent extra: {text_pair}. Missing but required: {}.",
    )
    request = _predict_request(texts=None)
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "input size does not match signature: 0!=1 len({}) != len({text}). Sent extra: {}. "
        "Missing but required: {text}.",
    )
    request.inputs["txt"].CopyFrom(tf.make_tensor_proto(TEXTS))
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "input tensor alias not found in signature: txt. Inputs expected to be in the set {text}.",
    )
    request = _predict_request(texts=None)
    request.inputs["text"].CopyFrom(tf.make_tensor_proto([1.5, 2.5]))
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Expects arg[0] to be string but float is provided",
    )
    request = _predict_request()
    request.output_filter.extend(["label", "logits"])
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "output tensor alias not found in signature: logits Outputs expected to be in the set "
        "{label,label_id,probabilities}.",
    )
    request = _predict_request()
    request.output_filter.extend(["label", "label"])
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "duplicate output tensor alias: label",
    )
    request = _predict_request(texts=[b"\xff\xfe broken"])
    code, message = _error(live.predictions.Predict, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "UTF-8" in message
    request = _predict_request(signature_name="classify_ids", texts=None)
    request.inputs["input_word_ids"].CopyFrom(tf.make_tensor_proto([[2, 5], [2, 6]], tf.int32))
    request.inputs["input_mask"].CopyFrom(tf.make_tensor_proto([[1, 1]], tf.int32))
    request.inputs["input_type_ids"].CopyFrom(tf.make_tensor_proto([5, 6], tf.int32))
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "input input_type_ids must have shape [-1,-1] (rank 2), got [2]",
    )
    request.inputs["input_type_ids"].CopyFrom(tf.make_tensor_proto([[0, 0], [0, 0]], tf.int32))
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "every input must have the same batch size (dimension 0): input_mask has 1, "
        "input_type_ids has 2, input_word_ids has 2",
    )


def test_ids_the_model_cannot_read_are_invalid_argument(live):
    request = _predict_request(signature_name="classify_ids", texts=None)
    request.inputs["input_word_ids"].CopyFrom(tf.make_tensor_proto([[2, 99999, 3]], tf.int32))
    request.inputs["input_mask"].CopyFrom(tf.make_tensor_proto([[1, 1, 1]], tf.int32))
    request.inputs["input_type_ids"].CopyFrom(tf.make_tensor_proto([[0, 0, 0]], tf.int32))
    assert _error(live.predictions.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "instance 0: input 'input_word_ids' has 99999 at position 1; ids must be in [0, 41): "
        "the model's vocabulary has 41 tokens",
    )


def _classification_request(texts, **spec) -> classification_pb2.ClassificationRequest:
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "sst"
    for field, value in spec.items():
        setattr(request.model_spec, field, value)
    for text in texts:
        example = request.input.example_list.examples.add()
        example.features.feature["text"].bytes_list.value.append(text.encode())
    return request


def test_classify_gives_each_label_with_its_probability(live):
    response = live.predictions.Classify(_classification_request(TEXTS), timeout=60)
    predicted = live.predictions.Predict(_predict_request(), timeout=60)
    probabilities = tf.make_ndarray(predicted.outputs["probabilities"])
    labels = live.core.latest.classifier.labels
    assert [[c.label for c in r.classes] for r in response.result.classifications] == [
        labels
    ] * len(TEXTS)
    scores = np.array([[c.score for c in r.classes] for r in response.result.classifications])
    np.testing.assert_allclose(scores, probabilities, rtol=1e-6, atol=1e-7)  # another graph
    examples = [{"text": text} for text in TEXTS]
    rest = _rest(live, "/v1/models/sst:classify", {"examples": examples})["results"]
    assert [[label for label, _ in row] for row in rest] == [labels] * len(TEXTS)
    np.testing.assert_array_equal(
        np.array([[score for _, score in row] for row in rest], np.float32), probabilities
    )
    assert response.model_spec.signature_name == "classify"
    assert response.model_spec.version.value == 1


def _multi_inference(texts, *tasks) -> inference_pb2.MultiInferenceRequest:
    request = inference_pb2.MultiInferenceRequest()
    for name, method, signature in tasks:
        task = request.tasks.add(method_name=f"tensorflow/serving/{method}")
        task.model_spec.name = name
        task.model_spec.signature_name = signature
    request.input.CopyFrom(_classification_request(texts).input)
    return request


def test_multi_inference_gives_what_classify_gives(live):
    request = _multi_inference(TEXTS, ("sst", "classify", ""))
    response = live.predictions.MultiInference(request, timeout=60)
    classified = live.predictions.Classify(_classification_request(TEXTS), timeout=60)
    (result,) = response.results
    assert result.classification_result == classified.result
    assert (result.model_spec.name, result.model_spec.version.value) == ("sst", 1)
    assert result.model_spec.signature_name == "classify"
    for tasks, code, message in [
        (
            [("sst", "classify", ""), ("sst", "classify", "classify")],
            "INVALID_ARGUMENT",
            "Duplicate evaluation of signature: classify",
        ),
        (
            [("sst", "classify", ""), ("other", "classify", "")],
            "INVALID_ARGUMENT",
            "All ModelSpecs in a MultiInferenceRequest must access the same model name.",
        ),
        (
            [("sst", "predict", "")],
            "UNIMPLEMENTED",
            "Unsupported signature method_name: tensorflow/serving/predict",
        ),
        (
            [("sst", "classify", "nope")],
            "INVALID_ARGUMENT",
            "Requested signature not found in model graph: nope",
        ),
    ]:
        request = _multi_inference(TEXTS, *tasks)
        assert _error(live.predictions.MultiInference, request) == (
            getattr(grpc.StatusCode, code),
            message,
        )


def _request_metrics(live) -> collections.Counter:
    """request_count by (model_name, status), and request_latency's count by (model_name, API,
    entrypoint), from the Prometheus text."""
    families = prometheus_text.parse(live.core.metrics.text())
    samples = families[":tensorflow:serving:request_count"]["samples"]
    found = collections.Counter({(s["model_name"], s["status"]): n for _, s, n in samples})
    for name, labels, number in families[":tensorflow:serving:request_latency"]["samples"]:
        if name.endswith("_count"):
            found[labels["model_name"], labels["API"], labels["entrypoint"]] = number
    return found


def test_the_request_metrics_count_what_tf_servings_count(live):
    # 0.2 s. http_server.cc counts every request under /v1/ by the model name and status it
    # parsed, and times those that succeed (API: the verb, none for a GET);
    # prediction_service_impl.cc counts and times Predict, Classify and Regress, no other call.
    before = _request_metrics(live)
    assert live.rest("/v1/models/sst")[0] == 200
    assert live.rest("/v1/models/sst/metadata")[0] == 200
    assert live.rest("/v1/models/sst:predict", {"instances": [5]})[0] == 400
    assert live.rest("/v1/foo")[0] == 400  # malformed: no model name
    preflight = exchange(live.app, "OPTIONS", "/v1/models/sst", headers={"origin": "http://a"})
    assert live.run(preflight)[0] == 200
    metadata = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    metadata.model_spec.name = "sst"
    live.predictions.GetModelMetadata(metadata, timeout=60)
    live.predictions.MultiInference(_multi_inference(TEXTS, ("sst", "classify", "")), timeout=60)
    assert _error(live.predictions.Predict, _predict_request(name="other"))[0] == (
        grpc.StatusCode.NOT_FOUND
    )
    live.predictions.Classify(_classification_request(TEXTS), timeout=60)
    counted = _request_metrics(live)
    counted.subtract(before)
    assert +counted == {
        ("sst", "OK"): 3,
        ("sst", "INVALID_ARGUMENT"): 1,
        ("", "INVALID_ARGUMENT"): 1,
        ("", "OK"): 1,
        ("other", "NOT_FOUND"): 1,
        ("sst", "", "REST"): 2,
        ("", "", "REST"): 1,
        ("sst", "Classify", "GRPC"): 1,
    }


def test_classify_and_regress_refuse_what_tf_serving_refuses(live):
    request = _classification_request(TEXTS, signature_name="serving_default")
    assert _error(live.predictions.Classify, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Expected classification signature method_name to be tensorflow/serving/classify. "
        "Was: tensorflow/serving/predict",
    )
    assert _error(live.predictions.Classify, _classification_request([])) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Input is empty.",
    )
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "sst"
    request.input.example_list.examples.add()
    assert _error(live.predictions.Regress, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "No signature was found with the name: regress",
    )


@pytest.fixture(scope="module")
def regression_live(regression_export):
    """The regression run's export served as model "score"."""
    _, export = regression_export
    live = _serve(export, name="score")
    yield live
    live.close()


def test_regress_gives_the_values_predict_gives(regression_live):
    live = regression_live
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "score"
    for text in TEXTS:
        example = request.input.example_list.examples.add()
        example.features.feature["text"].bytes_list.value.append(text.encode())
    response = live.predictions.Regress(request, timeout=60)
    values = [r.value for r in response.result.regressions]
    predicted = live.predictions.Predict(_predict_request(name="score"), timeout=60)
    expected = tf.make_ndarray(predicted.outputs["value"])
    np.testing.assert_allclose(values, expected.reshape(-1), rtol=1e-6, atol=1e-6)
    examples = [{"text": text} for text in TEXTS]
    rest = _rest(live, "/v1/models/score:regress", {"examples": examples})["results"]
    np.testing.assert_array_equal(np.array(rest, np.float32), np.float32(values))
    assert response.model_spec.signature_name == "regress"
    multi = _multi_inference(TEXTS, ("score", "regress", ""))
    (result,) = live.predictions.MultiInference(multi, timeout=60).results
    assert result.regression_result == response.result
    classify = _classification_request(TEXTS)
    classify.model_spec.name = "score"
    assert _error(live.predictions.Classify, classify) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "No signature was found with the name: classify",
    )


def test_bertfit_serve_runs_grpc_beside_rest_on_its_own_port(trained_run):
    """The CLI: with --port 0 the gRPC port is any free one too, said on start-up; a TF
    Serving client gets the numbers REST gives, from the same process."""
    process = start_serve("--run", trained_run[1].run_dir, "--port", "0", "--model-name", "sst")
    try:
        lines = lines_until(process, "gRPC", timeout=180)
        rest_url = re.search(r" on (http://\S+?)/v1/models/", lines[0])[1]
        grpc_port = int(re.search(r"gRPC \(TF Serving's API\) on 127\.0\.0\.1:(\d+)$", lines[1])[1])
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            response = stub.Predict(_predict_request(), timeout=60)
        request = urllib.request.Request(
            f"{rest_url}/v1/models/sst:predict", json.dumps({"instances": TEXTS}).encode()
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            rest = json.loads(answer.read())["predictions"]
        np.testing.assert_array_equal(
            tf.make_ndarray(response.outputs["probabilities"]),
            np.array([row["probabilities"] for row in rest], np.float32),
        )
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_busy_grpc_port_is_said_before_the_model_loads(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--run", "no-such-run", "--port", "0", "--grpc-port", str(port)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip() == (
        f"bertfit serve: error: cannot listen for gRPC on 127.0.0.1:{port}: the port is in use "
        "or the host is not an address of this machine; pass another --grpc-port, or "
        "--grpc-port -1 for no gRPC"
    )


@pytest.mark.parametrize("port", ["-2", "65536"])
def test_a_grpc_port_outside_the_tcp_range_is_refused(capsys, port):
    code = main(["serve", "--run", "no-such-run", "--grpc-port", port])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert f"--grpc-port {port} is not a TCP port" in err


def test_grpc_port_minus_one_serves_rest_only(capsys):
    code = main(["serve", "--run", "no-such-run", "--port", "0", "--grpc-port", "-1"])
    _, err = capsys.readouterr()
    assert code == 2 and "no-such-run: no such run directory or export" in err


@pytest.fixture(scope="module")
def pair_live(pair_classifier):
    classifier, expected = pair_classifier
    live = LiveServer(ModelServer(classifier, "pair"))
    yield live, expected
    live.close()


def test_text_pairs_predict_and_classify_as_rest_does(pair_live):
    live, expected = pair_live
    request = _predict_request(PAIR_TEXTS, name="pair")
    request.inputs["text_pair"].CopyFrom(tf.make_tensor_proto(PAIR_TEXTS[::-1]))
    response = live.predictions.Predict(request, timeout=60)
    probabilities = tf.make_ndarray(response.outputs["probabilities"])
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    rest = _rest(
        live,
        "/v1/models/pair:predict",
        {"inputs": {"text": PAIR_TEXTS, "text_pair": PAIR_TEXTS[::-1]}},
    )
    np.testing.assert_array_equal(probabilities, np.float32(rest["outputs"]["probabilities"]))

    classify = _classification_request(PAIR_TEXTS, name="pair")
    for example, second in zip(classify.input.example_list.examples, PAIR_TEXTS[::-1], strict=True):
        example.features.feature["text_pair"].bytes_list.value.append(second.encode())
    classified = live.predictions.Classify(classify, timeout=60).result.classifications
    assert [[c.label for c in row.classes] for row in classified] == [["a", "b", "c"]] * 3
    scores = [[c.score for c in row.classes] for row in classified]
    np.testing.assert_allclose(scores, expected, atol=1e-5)

    alone = _predict_request(PAIR_TEXTS, name="pair")  # the second text missing
    assert _error(live.predictions.Predict, alone) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "input size does not match signature: 1!=2 len({text}) != len({text,text_pair}). "
        "Sent extra: {}. Missing but required: {text_pair}.",
    )
