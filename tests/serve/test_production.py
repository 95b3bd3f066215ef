"""What a production server needs beside TF Serving's API: a bounded request queue (429 /
RESOURCE_EXHAUSTED), deadlines (REST's timeout, gRPC's client deadline), TF Serving's
Prometheus metrics, and a graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from bertfit.inference.predictor import load_classifier
from bertfit.serve.app import METRICS_PATH, ModelServer
from bertfit.serve.core import ServedVersion
from bertfit.serve.metrics import ServingMetrics
from tests.serve import prometheus_text
from tests.serve.asgi import call, exchange, serving
from tests.serve.conftest import lines_until, start_serve
from tests.serve.test_grpc import LiveServer

PREDICT = "/v1/models/sst:predict"


@pytest.fixture(scope="module")
def classifier(trained_run):
    return load_classifier(trained_run[1].run_dir)


def _predict_request(texts=("a fine film",)) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "sst"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(list(texts)))
    return request


@pytest.mark.slow
def test_requests_past_the_queue_bound_are_429_at_once(classifier):
    # Two requests wait 0.5 s for company in the batcher; the next two find the queue full.
    server = ModelServer(classifier, "sst", max_wait=0.5, max_queued_requests=2)

    async def scenario(app):
        waiting = [asyncio.ensure_future(call(app, PREDICT, {"instances": ["ok"]})) for _ in "ab"]
        await asyncio.sleep(0.1)
        began = time.monotonic()
        refused = await asyncio.gather(
            *(exchange(app, "POST", PREDICT, {"instances": ["no"]}) for _ in "cd")
        )
        refused_in = time.monotonic() - began
        return await asyncio.gather(*waiting), refused, refused_in

    answered, refused, refused_in = serving(server, scenario)
    assert [status for status, _ in answered] == [200, 200]
    assert refused_in < 0.3  # refused at once, not after the queue drained
    for status, _, body in refused:
        assert status == 429
        assert json.loads(body)["error"] == (
            "the server has 2 requests in progress, the most it queues (--max-queued-requests "
            "2); retry after a short wait, or send fewer requests at once"
        )
    families = prometheus_text.parse(server.core.metrics.text())
    count = ":tensorflow:serving:request_count"
    assert prometheus_text.value(families, count, model_name="sst", status="OK") == 2
    assert prometheus_text.value(families, count, status="RESOURCE_EXHAUSTED") == 2


def test_a_rest_request_past_its_timeout_is_504_and_never_runs(classifier):
    server = ModelServer(classifier, "sst", max_wait=1.0, rest_timeout=0.2)

    async def scenario(app):
        answer = await call(app, PREDICT, {"instances": ["slow"]})
        await asyncio.sleep(1.2)  # past the batch's wait: the request left, nothing runs
        return answer

    status, body = serving(server, scenario)
    assert status == 504
    assert body["error"] == (
        "the request did not finish within 200 ms; send fewer instances, or start the server "
        "with a larger --rest-api-timeout-in-ms"
    )
    assert server.batcher.batches == 0


@pytest.fixture(scope="module")
def live(classifier):
    served = ServedVersion(1, classifier, max_wait=0.6)
    live = LiveServer(ModelServer(None, "sst", versions=[served], max_queued_requests=1))
    yield live
    live.close()


@pytest.mark.slow
def test_grpc_honours_the_deadline_and_the_queue_bound(live):
    with pytest.raises(grpc.RpcError) as raised:  # waits 0.6 s for company: past 0.3 s
        live.predictions.Predict(_predict_request(), timeout=0.3)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(0.5)  # the abandoned request has left the queue
    first = live.predictions.Predict.future(_predict_request(), timeout=30)
    time.sleep(0.2)
    with pytest.raises(grpc.RpcError) as raised:
        live.predictions.Predict(_predict_request(), timeout=30)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-queued-requests 1" in raised.value.details()
    assert len(first.result().outputs["probabilities"].float_val) == 2


@pytest.mark.slow
def test_metrics_scrape_as_prometheus_text_with_tf_servings_names(live):
    live.predictions.Predict(_predict_request(["a", "b", "c"]), timeout=30)
    assert live.rest(PREDICT, {"instances": ["a fine film"]})[0] == 200
    assert live.rest(PREDICT, {"instances": [5]})[0] == 400
    assert live.rest("/v1/models/other:predict", {"instances": ["a"]})[0] == 404
    status, headers, body = live.run(exchange(live.app, "GET", METRICS_PATH))
    assert status == 200 and headers["content-type"].startswith("text/plain")
    families = prometheus_text.parse(body.decode())
    kinds = {name: family["type"] for name, family in families.items()}
    assert kinds == {
        ":tensorflow:serving:request_count": "counter",
        ":tensorflow:serving:request_latency": "histogram",
        ":tensorflow:serving:batching_session:input_batch_size": "histogram",
        ":tensorflow:serving:batching_session:processed_batch_size": "histogram",
        ":tensorflow:serving:batching_session:queuing_latency": "histogram",
        ":tensorflow:cc:saved_model:load_attempt_count": "counter",
        ":tensorflow:cc:saved_model:load_latency": "counter",
        ":bertfit:serving:model_version_state": "gauge",
    }
    count, latency = ":tensorflow:serving:request_count", ":tensorflow:serving:request_latency"
    assert prometheus_text.value(families, count, model_name="sst", status="INVALID_ARGUMENT") >= 1
    assert prometheus_text.value(families, count, model_name="other", status="NOT_FOUND") == 1
    for api, entrypoint in [("Predict", "GRPC"), ("predict", "REST")]:
        observed = prometheus_text.value(
            families, latency, latency + "_count", API=api, entrypoint=entrypoint
        )
        assert observed >= 1
    sizes = ":tensorflow:serving:batching_session:input_batch_size"
    assert prometheus_text.value(families, sizes, sizes + "_bucket", le="4") >= 1  # 3 rows
    assert re.search(
        r'request_latency_bucket\{model_name="sst",API="Predict",entrypoint="GRPC"', body.decode()
    )


def test_counters_are_whole_numbers_and_histogram_sums_have_six_digits_as_tf_servings():
    # prometheus_exporter.cc writes a counter "%d" and a histogram's sum as absl::StrCat does
    metrics = ServingMetrics()
    metrics.load_latency.add(1234567.8, model_path="m")
    metrics.request_latency.add(1234567, model_name="sst", API="predict", entrypoint="REST")
    text = metrics.text()
    assert ':tensorflow:cc:saved_model:load_latency{model_path="m"} 1234567\n' in text
    labels = 'model_name="sst",API="predict",entrypoint="REST"'
    assert f":tensorflow:serving:request_latency_sum{{{labels}}} 1.23457e+06\n" in text


def _announced(process) -> tuple[str, int]:
    lines = lines_until(process, "gRPC", timeout=180)
    rest_url = re.search(r" on (http://\S+?)/v1/models/", lines[-2])[1]
    grpc_port = int(re.search(r":(\d+)$", lines[-1])[1])
    return rest_url, grpc_port


@pytest.mark.slow
def test_sigterm_finishes_the_requests_in_progress_refuses_new_ones_and_exits_0(trained_run):
    run = trained_run[1].run_dir
    process = start_serve(
        "--run", run, "--port", "0", "--model-name", "sst", "--max-wait-ms", "1500"
    )
    try:
        rest_url, grpc_port = _announced(process)
        answers = {}

        def rest():  # waits 1.5 s for company in the batcher
            body = json.dumps({"instances": ["a fine film"]}).encode()
            with urllib.request.urlopen(f"{rest_url}{PREDICT}", body, timeout=30) as answer:
                answers["rest"] = answer.status, json.loads(answer.read())

        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        threads = [threading.Thread(target=rest)]
        threads[0].start()
        in_flight = stub.Predict.future(_predict_request(), timeout=30)
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        host, port = re.match(r"http://(.+):(\d+)", rest_url).groups()
        with pytest.raises(ConnectionRefusedError):  # no new connections
            socket.create_connection((host, int(port)), timeout=5).close()
        with pytest.raises(grpc.RpcError) as raised:  # no new calls
            stub.Predict(_predict_request(), timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        threads[0].join(30)
        assert answers["rest"][0] == 200 and len(answers["rest"][1]["predictions"]) == 1
        assert len(in_flight.result().outputs["probabilities"].float_val) == 2
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err[-3000:]
        assert "drained and stopped" in out
        channel.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
