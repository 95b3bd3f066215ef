"""vLLM's `POST /classify` and TEI's `POST /predict` on `bertfit serve`'s app, in-process: the
request bodies their documentation and clients send, answered in their shapes with the
numbers `predict` gives, refused in their error formats, counted in the same metrics."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.serve.app import ModelServer
from tests.serve.asgi import call, serving
from tests.serve.conftest import PAIR_TEXTS

# vLLM's example client (examples/pooling/classify/openai_classification_client.py) sends a
# list of prompts; these are words of the tiny vocabulary.
TEXTS = ["the film was great fun", "a boring , awful plot", "it is not very good"]


@pytest.fixture(scope="module")
def expected(text_classifier):
    return text_classifier.predict_proba(TEXTS)


def _serve(classifier, *requests, name="sst"):
    """The (status, body) of each (path, body) in `requests`, in order, on one server."""
    server = ModelServer(classifier, name, max_wait=0.0)

    async def scenario(app):
        return [await call(app, path, body) for path, body in requests]

    return serving(server, scenario)


def _assert_same_ranking(ranked, other):
    """The same labels in the same order, their scores equal to float32's rounding (a batch of
    other sizes may differ in the last bit)."""
    assert [p["label"] for p in ranked] == [p["label"] for p in other]
    np.testing.assert_allclose([p["score"] for p in ranked], [p["score"] for p in other], 1e-6)


def test_vllm_classify_answers_vllms_classification_response(text_classifier, expected):
    # The curl of vLLM's docs: {"model": ..., "input": [...]}; SGLang's path and one string too.
    (status, body), (_, sglang), (_, one) = _serve(
        text_classifier,
        ("/classify", {"model": "sst", "input": TEXTS}),
        ("/v1/classify", {"model": "sst", "input": TEXTS}),
        ("/classify", {"input": TEXTS[1]}),
    )
    assert status == 200
    assert set(body) == {"id", "object", "created", "model", "data", "usage"}
    assert body["id"].startswith("classify-") and body["object"] == "list"
    assert body["model"] == "sst" and isinstance(body["created"], int)
    assert [row["index"] for row in body["data"]] == [0, 1, 2]
    np.testing.assert_allclose([row["probs"] for row in body["data"]], expected, atol=1e-6)
    assert [row["label"] for row in body["data"]] == [
        ("neg", "pos")[i] for i in expected.argmax(-1)
    ]
    assert {row["num_classes"] for row in body["data"]} == {2}
    usage = body["usage"]  # [CLS] the film was great fun [SEP] ...: 7 + 7 + 7 tokens
    assert usage == {
        "prompt_tokens": 21,
        "total_tokens": 21,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }
    assert sglang["data"] == body["data"]
    assert len(one["data"]) == 1
    np.testing.assert_allclose(one["data"][0]["probs"], body["data"][1]["probs"], 1e-6)


def test_vllm_classify_refuses_in_vllms_error_response(text_classifier):
    answers = _serve(
        text_classifier,
        ("/classify", {"model": "other", "input": "fun"}),
        ("/classify", {"model": "sst"}),
        ("/classify", {"model": "sst", "input": [[101, 2023]]}),
        ("/classify", b"not json"),
    )
    (status, body), *rest = answers
    assert status == 404
    assert body == {
        "error": {
            "message": "The model `other` does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
    }
    for status, body in rest:
        assert status == 400 and body["error"]["type"] == "BadRequestError", body
        assert body["error"]["code"] == 400 and body["error"]["message"]


def test_tei_predict_ranks_each_inputs_labels_as_tei_does(text_classifier, expected):
    # TEI's README: {"inputs": "I like you. I love you"}; a batch is [[text], [text], ...].
    answers = _serve(
        text_classifier,
        ("/predict", {"inputs": TEXTS[0]}),
        ("/predict", {"inputs": [[text] for text in TEXTS]}),
        ("/predict", {"inputs": [[TEXTS[0]]], "raw_scores": True, "truncate": True}),
    )
    (status, single), (_, batch), (_, raw) = answers
    assert status == 200 and len(batch) == 3
    _assert_same_ranking(single, batch[0])
    for ranked, probabilities in zip(batch, expected, strict=True):
        assert [p["score"] for p in ranked] == sorted((p["score"] for p in ranked), reverse=True)
        by_label = {p["label"]: p["score"] for p in ranked}
        np.testing.assert_allclose([by_label["neg"], by_label["pos"]], probabilities, atol=1e-6)
    log_probabilities = {p["label"]: p["score"] for p in raw[0]}  # the logits less logsumexp
    np.testing.assert_allclose(
        [log_probabilities["neg"], log_probabilities["pos"]], np.log(expected[0]), atol=1e-5
    )


def test_tei_predict_refuses_in_teis_error_response(text_classifier):
    long_text = " ".join(["good"] * 20)  # 22 tokens with [CLS] and [SEP]: over 16
    answers = _serve(
        text_classifier,
        ("/predict", {"inputs": long_text, "truncate": False}),
        ("/predict", {"inputs": long_text}),  # TEI's default: cut it
        ("/predict", {"inputs": []}),
        ("/predict", {"inputs": ["fun", "good"]}),  # a pair, to a model of single texts
        ("/predict", {"inputs": "fun", "truncation_direction": "Left"}),
        ("/predict", {"inputs": ["a", "b", "c"]}),
    )
    (status, body), (cut, _), (empty, empty_body), *validation = answers
    assert (status, body) == (
        422,
        {
            "error": "Input validation error: `inputs` must have less than 16 tokens. Given: 22",
            "error_type": "Validation",
        },
    )
    assert cut == 200
    assert (empty, empty_body["error_type"]) == (400, "Empty")
    for status, body in validation:
        assert (status, body["error_type"]) == (422, "Validation"), body


def test_tei_predict_takes_text_pairs(pair_classifier):
    classifier, expected = pair_classifier  # multi-label ("a", "b", "c"): a sigmoid each
    inputs = [[text, pair] for text, pair in zip(PAIR_TEXTS, PAIR_TEXTS[::-1], strict=True)]
    (status, batch), (_, one), (_, raw) = _serve(
        classifier,
        ("/predict", {"inputs": inputs}),
        ("/predict", {"inputs": inputs[0]}),  # one pair: [string, string]
        ("/predict", {"inputs": inputs[:1], "raw_scores": True}),
        name="pair",
    )
    assert status == 200
    _assert_same_ranking(one, batch[0])
    for ranked, probabilities in zip(batch, expected, strict=True):
        by_label = {p["label"]: p["score"] for p in ranked}
        np.testing.assert_allclose([by_label[k] for k in "abc"], probabilities, atol=1e-6)
    logits = {p["label"]: p["score"] for p in raw[0]}
    np.testing.assert_allclose(
        [logits[k] for k in "abc"], np.log(expected[0] / (1 - expected[0])), atol=1e-4
    )


def test_both_apis_share_the_batcher_and_the_request_metrics(text_classifier):
    server = ModelServer(text_classifier, "sst", max_wait=0.05)

    async def scenario(app):
        import asyncio

        return await asyncio.gather(
            call(app, "/classify", {"model": "sst", "input": TEXTS}),
            call(app, "/predict", {"inputs": [[text] for text in TEXTS]}),
            call(app, "/v1/models/sst:predict", {"instances": TEXTS}),
        )

    answers = serving(server, scenario)
    assert [status for status, _ in answers] == [200, 200, 200]
    assert server.batcher.batches == 1  # the three requests' 9 texts in one model call
    metrics = server.core.metrics.text()
    for api in ("/classify", "/predict", "predict"):
        assert f'API="{api}",entrypoint="REST"' in metrics
    assert 'request_count{model_name="sst",status="OK"} 3' in metrics
