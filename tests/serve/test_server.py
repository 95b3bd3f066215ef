"""`bertfit serve` in a subprocess on 127.0.0.1, spoken to over HTTP as TF Serving clients do."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from bertfit.inference.predictor import load_classifier
from tests.tiny import sentiment_rows

ROOT = Path(__file__).resolve().parents[2]


def _announced_url(process: subprocess.Popen, timeout: float) -> str:
    """The address `bertfit serve` says it serves on (with --port 0, the port it bound)."""

    def announcement() -> re.Match | None:
        for line in process.stdout:
            if found := re.search(r" on (http://\S+?)/v1/models/", line):
                return found
        return None  # it exited without announcing

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reading = pool.submit(announcement)
        try:
            found = reading.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            process.kill()  # ends the read
            raise AssertionError(f"the server announced nothing in {timeout:.0f}s") from None
    assert found, process.communicate()[1][-3000:]
    return found[1]


@pytest.fixture(scope="module")
def server(trained_run):
    _, result = trained_run
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    # Port 0: the server binds a free port itself and says which; a port picked here and handed
    # over could be taken by another process in between.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bertfit.cli",
            "serve",
            "--run",
            result.run_dir,
            "--port",
            "0",
            "--model-name",
            "sst",
            "--max-request-instances",
            "50",
            "--max-wait-ms",
            "20",
            "--read-timeout-seconds",
            "2",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = _announced_url(process, timeout=180)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2)
            break
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
    yield url, result.run_dir
    process.terminate()
    process.communicate(timeout=30)


def _call(url: str, path: str, body=None) -> tuple[int, dict]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(
        url + path, data=data, method="GET" if data is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_status_and_metadata_look_like_tf_serving(server):
    url, _ = server
    assert _call(url, "/v1/models/sst") == (
        200,
        {
            "model_version_status": [
                {
                    "version": "1",
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        },
    )
    status, metadata = _call(url, "/v1/models/sst/versions/1/metadata")
    assert status == 200 and metadata["model_spec"]["name"] == "sst"
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    default = signatures["serving_default"]
    assert default["inputs"]["text"]["dtype"] == "DT_STRING"
    assert set(default["outputs"]) == {"probabilities", "label", "label_id"}
    assert set(signatures["classify_ids"]["inputs"]) == {
        "input_word_ids",
        "input_mask",
        "input_type_ids",
    }


def test_row_and_columnar_predictions_equal_the_python_predictor(server):
    url, run = server
    texts = [t for t, _ in sentiment_rows(12, seed=21)]
    expected = load_classifier(run).predict_proba(texts)
    status, rows = _call(url, "/v1/models/sst:predict", {"instances": texts})
    assert status == 200
    np.testing.assert_allclose(
        [r["probabilities"] for r in rows["predictions"]], expected, atol=1e-5
    )
    assert [r["label"] for r in rows["predictions"]] == [
        ["neg", "pos"][i] for i in expected.argmax(1)
    ]
    status, objects = _call(
        url, "/v1/models/sst:predict", {"instances": [{"text": t} for t in texts]}
    )
    assert objects == rows
    status, columns = _call(url, "/v1/models/sst:predict", {"inputs": {"text": texts}})
    assert status == 200
    np.testing.assert_allclose(columns["outputs"]["probabilities"], expected, atol=1e-5)
    assert columns["outputs"]["label_id"] == expected.argmax(1).tolist()


def test_concurrent_requests_share_batches(server):
    url, _ = server
    _, before = _call(url, "/healthz")
    texts = [t for t, _ in sentiment_rows(40, seed=22)]
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(
            pool.map(lambda t: _call(url, "/v1/models/sst:predict", {"instances": [t]}), texts)
        )
    assert all(status == 200 and len(body["predictions"]) == 1 for status, body in answers)
    _, after = _call(url, "/healthz")
    assert after["batches"] - before["batches"] < len(texts)


def test_the_ids_signature(server):
    url, _ = server
    status, body = _call(
        url,
        "/v1/models/sst:predict",
        {
            "signature_name": "classify_ids",
            "instances": [
                {"input_word_ids": [2, 5, 3], "input_mask": [1, 1, 1], "input_type_ids": [0, 0, 0]}
            ],
        },
    )
    assert status == 200
    assert sum(body["predictions"][0]["probabilities"]) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "JSON Parse error"),
        ({"instances": ["a"], "signature_name": "nope"}, 400, 'signature name: "nope" not found'),
        ({"instances": ["a"] * 51}, 400, "at most 50"),
        ({"instances": ["a", 5]}, 400, "instance 1: input 'text' must be a string"),
        ({"instances": [{"txt": "a"}]}, 400, "does not have named input: txt"),
        ({"texts": ["a"]}, 400, "'instances'"),
        ({"instances": "a"}, 400, "Expecting 'instances' to be an list/array"),
        ({"instances": []}, 400, "No values in 'instances' array"),
        ({"instances": ["ok", "\ud800"]}, 400, "instance 1: input 'text' has a lone surrogate"),
        (
            {
                "signature_name": "classify_ids",
                "instances": [
                    {
                        "input_word_ids": [2, 2**31, 3],
                        "input_mask": [1] * 3,
                        "input_type_ids": [0] * 3,
                    }
                ],
            },
            400,
            "instance 0: input 'input_word_ids' has 2147483648 at position 1",
        ),
        (
            {
                "signature_name": "classify_ids",
                "instances": [
                    {"input_word_ids": [2, 3], "input_mask": [1], "input_type_ids": [0, 0]}
                ],
            },
            400,
            "same length",
        ),
    ],
)
def test_bad_requests_get_tf_serving_errors_and_the_server_stays_up(server, body, status, message):
    url, _ = server
    got, answer = _call(url, "/v1/models/sst:predict", body)
    assert got == status and message in answer["error"]
    assert _call(url, "/v1/models/sst:predict", {"instances": ["fine"]})[0] == 200


def test_unknown_models_and_versions_are_404(server):
    url, _ = server
    assert _call(url, "/v1/models/other:predict", {"instances": ["a"]}) == (
        404,
        {"error": "Servable not found for request: Latest(other)"},
    )
    assert _call(url, "/v1/models/sst/versions/7")[0] == 404


def _received(connection: socket.socket) -> bytes:
    """Everything the server sends on `connection` until it closes it (10 s at most)."""
    connection.settimeout(10)
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data


def test_stalled_connections_are_closed_and_others_answered(server):
    url, _ = server
    address = urllib.parse.urlsplit(url)
    start = b"POST /v1/models/sst:predict HTTP/1.1\r\nHost: x\r\n"
    half_headers, half_bodies = [], []
    for _ in range(20):
        half_headers.append(socket.create_connection((address.hostname, address.port)))
        half_headers[-1].sendall(start + b"Content-Type: applic")
        half_bodies.append(socket.create_connection((address.hostname, address.port)))
        half_bodies[-1].sendall(start + b"Content-Length: 1000\r\n\r\n" + b'{"instances": [')
    began = time.monotonic()
    assert _call(url, "/v1/models/sst:predict", {"instances": ["fine"]})[0] == 200
    assert time.monotonic() - began < 1.5  # the stalled connections delay no one
    for connection in half_bodies:  # --read-timeout-seconds 2: a 408, then closed
        head, _, body = _received(connection).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
        assert json.loads(body)["error"].startswith(
            "the request body did not arrive within 2 s (15 bytes came)"
        )
    for connection in half_headers:  # no request to answer: closed
        assert _received(connection) == b""
    assert time.monotonic() - began < 8
    for connection in half_headers + half_bodies:
        connection.close()
