"""`bertfit serve` on the export of a long-document model (issue 35): whole documents in over
TF Serving's REST API, answered as `predict` answers them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.export.serving import export_classifier
from bertfit.serve.app import ModelServer, served_versions
from tests.long_documents import DOCUMENTS, chunk_classifier
from tests.serve.asgi import exchange, serving

PATH = "/v1/models/docs"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return chunk_classifier(tmp_path_factory.mktemp("chunk"))


@pytest.fixture(scope="module")
def server(classifier, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    export_classifier(classifier, root)
    return ModelServer(None, "docs", versions=served_versions(root, max_wait=0.01))


def _ask(server, *requests) -> list[tuple[int, object]]:
    async def scenario(app):
        answers = []
        for request in requests:
            status, _, body = await exchange(app, "POST", *request)
            answers.append((status, json.loads(body)))
        return answers

    return serving(server, scenario)


@pytest.mark.slow  # exports and loads the SavedModel: about 25 s on a busy 2-core CPU
def test_rest_predict_and_classify_answer_long_documents_as_predict(classifier, server):
    expected = classifier.predict_proba(DOCUMENTS)
    examples = [{"text": text} for text in DOCUMENTS]
    answers = _ask(
        server,
        (f"{PATH}:predict", {"instances": DOCUMENTS}),
        (f"{PATH}:predict", {"inputs": {"text": DOCUMENTS}}),
        (f"{PATH}:predict", {"instances": [DOCUMENTS[0]]}),  # 9 windows, alone
        (f"{PATH}:classify", {"examples": examples}),
    )
    assert [status for status, _ in answers] == [200] * 4, answers
    rows = answers[0][1]["predictions"]
    assert len(rows) == len(DOCUMENTS)
    np.testing.assert_allclose([r["probabilities"] for r in rows], expected, rtol=0, atol=1e-5)
    assert [r["label"] for r in rows] == [p["label"] for p in classifier.predict(DOCUMENTS)]
    columnar = answers[1][1]["outputs"]["probabilities"]
    np.testing.assert_allclose(columnar, expected, rtol=0, atol=1e-5)
    alone = answers[2][1]["predictions"][0]["probabilities"]
    np.testing.assert_allclose(alone, expected[0], rtol=0, atol=1e-5)
    results = answers[3][1]["results"]
    scores = [[score for _, score in row] for row in results]
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


@pytest.mark.slow  # shares the export above
def test_classify_splits_long_documents_into_calls_of_batch_size_windows(classifier, server):
    served = server.core.latest
    assert served.examples_per_call(8) == 16  # batch_size 64 windows, max_chunks 4
    served.classifier.batch_size = 8  # 2 documents of up to 4 windows a call
    try:
        assert served.examples_per_call(len(DOCUMENTS)) == 2
        examples = [{"text": text} for text in DOCUMENTS[:-1]]  # 7: the last call holds 1
        [(status, body)] = _ask(server, (f"{PATH}:classify", {"examples": examples}))
    finally:
        served.classifier.batch_size = 64
    assert status == 200, body
    scores = [[score for _, score in row] for row in body["results"]]
    expected = classifier.predict_proba(DOCUMENTS[:-1])
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)
