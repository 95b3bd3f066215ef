"""`bertfit serve` answers as TensorFlow Serving's REST API does (docs/serving.md lists every
behaviour with TF Serving's source line): one test per group of behaviours, on the real ASGI app
in-process, serving two exported versions of the tiny trained run (and a regression run)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
import tensorflow as tf

from bertfit.export.serving import export_classifier
from bertfit.inference.graph import IdLimits
from bertfit.inference.predictor import load_classifier
from bertfit.serve.app import ModelServer, served_versions
from bertfit.serve.rest import float32_text
from bertfit.serve.versions import VersionPolicy
from tests.serve.asgi import exchange, serving
from tests.serve.conftest import PAIR_TEXTS
from tests.tiny import sentiment_rows

TEXTS = [t for t, _ in sentiment_rows(6, seed=41)]
PREDICT = "/v1/models/sst:predict"


@pytest.fixture(scope="module")
def run_dir(trained_run):
    return trained_run[1].run_dir


@pytest.fixture(scope="module")
def export_root(run_dir, tmp_path_factory):
    """Versions 1 and 2 of the trained run, as `bertfit export` writes them."""
    root = tmp_path_factory.mktemp("export")
    classifier = load_classifier(run_dir)
    export_classifier(classifier, root)
    export_classifier(classifier, root)
    return root


@pytest.fixture(scope="module")
def expected(run_dir):
    return load_classifier(run_dir).predict_proba(TEXTS)


@pytest.fixture(scope="module")
def versions(export_root):
    """Both versions: TF Serving's `all` version policy (its default serves the latest only,
    `tests/serve/test_versions.py`)."""
    return served_versions(export_root, max_wait=0.01, policy=VersionPolicy("all"))


def _server(versions, **options) -> ModelServer:
    labels = options.pop("version_labels", {"stable": 1, "canary": 2})
    return ModelServer(None, "sst", versions=versions, version_labels=labels, **options)


def _ask(server, *requests):
    """[(status, headers, body as JSON or bytes)] of (method, path[, body[, headers]])s."""

    async def scenario(app):
        answers = []
        for request in requests:
            status, headers, body = await exchange(app, *request)
            try:
                body = json.loads(body)
            except ValueError:
                pass
            answers.append((status, headers, body))
        return answers

    return serving(server, scenario)


def _ids(word_ids) -> dict:
    n = len(word_ids)
    return {"input_word_ids": word_ids, "input_mask": [1] * n, "input_type_ids": [0] * n}


@pytest.mark.parametrize(
    "method, path, status, message",
    [
        ("GET", "/v1/foo", 400, "Malformed request: GET /v1/foo"),
        ("POST", "/v1/foo", 400, "Malformed request: POST /v1/foo"),
        ("GET", "/v1/models", 400, "Missing model name in request."),
        ("POST", "/v1/models", 400, "Malformed request"),
        ("GET", "/v1/models/sst/debug", 400, "Malformed request"),
        ("GET", "/v1/models/sst:predict", 400, "Malformed request: GET /v1/models/sst:predict"),
        ("POST", "/v1/models/sst/metadata", 400, "Malformed request"),
        ("POST", "/v1/models/sst/version/1:predict", 400, "Malformed request"),
        ("POST", "/v1/models/sst/versions/HELLO:predict", 400, "Malformed request"),
        ("GET", "/v1/models/sst/versions/HELLO", 400, "Malformed request"),
        ("POST", "/v1/models/sst/label/stable:predict", 400, "Malformed request"),
        ("POST", "/v1/models/sst/versions/1/labels/stable:predict", 400, "Malformed request"),
        ("POST", "/v1/models/sst:PREDICT", 400, "Malformed request"),
        ("PUT", PREDICT, 400, "Malformed request: PUT /v1/models/sst:predict"),
        ("DELETE", "/v1/models/sst", 400, "Malformed request"),
        ("GET", f"/v1/models/sst/versions/{2**64 - 1}", 400, "Failed to convert version"),
    ],
)
def test_paths_and_methods_tf_serving_cannot_dispatch_are_400_malformed(
    versions, method, path, status, message
):
    [(got, headers, body)] = _ask(_server(versions), (method, path, {"instances": ["a"]}))
    assert (got, body) == (status, {"error": body["error"]}) and message in body["error"]
    assert headers["content-type"] == "application/json"


def test_paths_are_case_insensitive_except_the_verbs_and_outside_v1_is_404(versions):
    server = _server(versions)
    answers = _ask(
        server,
        ("POST", "/V1/MODELS/sst:predict", {"instances": ["a"]}),
        ("GET", "/v1/Models/sst/Versions/1"),
        ("GET", "/v1/models/sst/METADATA"),  # "METADATA" is no "metadata": the status
        ("GET", "/v1/models/SST"),  # model names are as given
        ("GET", "/v2/models/sst"),
        ("GET", "/healthz"),
    )
    assert answers[0][0] == 200 and len(answers[0][2]["predictions"]) == 1
    assert answers[1][0] == 200 and answers[1][2]["model_version_status"][0]["version"] == "1"
    assert answers[2][0] == 200 and "model_version_status" in answers[2][2]
    assert answers[3][:1] == (404,)
    assert answers[3][2] == {"error": "Could not find any versions of model SST"}
    assert answers[4][0] == 404 and answers[4][2] == b""
    assert answers[5][0] == 200 and answers[5][2]["status"] == "ok"


def test_versions_labels_and_unknown_models(versions, export_root):
    server = _server(versions)
    assert [served.version for served in versions] == [1, 2]
    body = {"instances": TEXTS[:1]}
    before = {number: served.batcher.batches for number, served in server.core.versions.items()}
    answers = _ask(
        server,
        ("GET", "/v1/models/sst"),
        ("GET", "/v1/models/sst/versions/1"),
        ("GET", "/v1/models/sst/versions/7"),
        ("GET", "/v1/models/sst/metadata"),
        ("GET", "/v1/models/sst/labels/stable/metadata"),
        ("POST", "/v1/models/sst/labels/stable:predict", body),
        ("POST", "/v1/models/sst/labels/nope:predict", body),
        ("POST", "/v1/models/sst/versions/7:predict", body),
        ("POST", "/v1/models/other:predict", body),
        ("POST", "/v1/models/other/versions/1:predict", body),
        ("GET", "/v1/models/sst/labels/nope"),  # GetModelStatus ignores labels: every version
    )
    status = [v["version"] for v in answers[0][2]["model_version_status"]]
    assert status == ["2", "1"]  # newest first (servable_state_monitor.h: std::greater)
    assert [v["version"] for v in answers[1][2]["model_version_status"]] == ["1"]
    assert (
        answers[2][0] == 404 and answers[2][2]["error"] == "Could not find version 7 of model sst"
    )
    assert answers[3][2]["model_spec"] == {"name": "sst", "signature_name": "", "version": "2"}
    assert answers[4][2]["model_spec"]["version"] == "1"
    assert answers[5][0] == 200
    after = {number: served.batcher.batches for number, served in server.core.versions.items()}
    assert after[1] - before[1] == 1 and after[2] == before[2]  # the label's version answered
    assert answers[6][:1] == (400,)
    assert answers[6][2] == {"error": "Unrecognized servable version label: nope"}
    assert answers[7][0] == 404
    assert answers[7][2] == {"error": "Servable not found for request: Specific(sst, 7)"}
    assert answers[8][2] == {"error": "Servable not found for request: Latest(other)"}
    assert answers[9][2] == {"error": "Servable not found for request: Specific(other, 1)"}
    assert answers[10][0] == 200 and len(answers[10][2]["model_version_status"]) == 2


@pytest.mark.parametrize(
    "body, message",
    [
        (b"", "JSON Parse error: The document is empty"),
        (b"  \n", "JSON Parse error: The document is empty"),
        (b"instances = [1, 2]", "JSON Parse error: "),
        (b'["a"]', 'JSON Value: ["a"] Is not object'),
        ({"signature_name": None, "instances": ["a"]}, "'signature_name' key must be a string"),
        ({"signature_name": 100, "instances": ["a"]}, "'signature_name' key must be a string"),
        ({"signature_name": "nope", "instances": ["a"]}, 'name: "nope" not found'),
        ({"instances": ["a"], "inputs": ["a"]}, "expecting only one of 'inputs' or 'instances'"),
        ({"instances": {"text": "a"}}, "Expecting 'instances' to be an list/array"),
        ({"instances": []}, "No values in 'instances' array"),
        ({"texts": ["a"]}, "Missing 'inputs' or 'instances' key"),
        ({"instances": ["a", {"text": "b"}]}, "Expecting value/list but got object at item 1"),
        ({"instances": [{"text": "a"}, "b"]}, "Expecting object but got list at item 1"),
        ({"instances": [{"text": "a", "x": "b"}]}, "does not have named input: x"),
        ({"instances": [{"b64": "!!!"}]}, "Unable to base64 decode"),
        ({"inputs": {"txt": ["a"]}}, "Missing named input: text in 'inputs' object."),
        (
            {"signature_name": "classify_ids", "instances": [[2, 5, 3]]},
            "instances is a plain list, but expecting list of objects",
        ),
        (
            {"signature_name": "classify_ids", "inputs": [[2, 5, 3]]},
            "inputs is a plain value/list, but expecting an object",
        ),
    ],
)
def test_request_bodies_tf_serving_refuses_are_400_with_its_message(versions, body, message):
    [(status, _, answer)] = _ask(_server(versions), ("POST", PREDICT, body))
    assert status == 400 and message in answer["error"], answer


def test_an_empty_columnar_batch_is_200_with_outputs_of_no_rows(versions):
    # TF Serving runs the graph on a batch of no rows ({"instances": []} stays a 400, above).
    ids = {"input_word_ids": [], "input_mask": [], "input_type_ids": []}
    answers = _ask(
        _server(versions),
        ("POST", PREDICT, {"inputs": []}),
        ("POST", PREDICT, {"inputs": {"text": []}}),
        ("POST", PREDICT, {"signature_name": "classify_ids", "inputs": ids}),
    )
    for status, _, body in answers:
        assert (status, body) == (
            200,
            {"outputs": {"label": [], "label_id": [], "probabilities": []}},
        )


@pytest.mark.slow
def test_json_nested_200000_deep_is_read_as_tf_servings_iterative_parser_reads_it(
    versions, expected
):
    # json_tensor_test.cc DeeplyNestedWellFormed / DeeplyNestedMalformed (500000 there).
    nested = "[" * 200_000 + "]" * 200_000
    ignored = f'{{"instances": {json.dumps(TEXTS)}, "nested": {nested}}}'
    answers = _ask(
        _server(versions),
        ("POST", PREDICT, ignored.encode()),
        ("POST", PREDICT, f'{{"signature_name": {nested}}}'.encode()),
        ("POST", PREDICT, f'{{"instances": [{nested}]}}'.encode()),
        ("POST", PREDICT, b'{"a": ' + b"[" * 5000 + b"}"),
    )
    (ok, _, body), (bad_name, _, name), (deep, _, instance), (broken, _, parse) = answers
    assert ok == 200
    np.testing.assert_allclose(
        [r["probabilities"] for r in body["predictions"]], expected, atol=1e-5
    )
    assert bad_name == 400 and name["error"].endswith(
        "'signature_name' key must be a string value."
    )
    assert name["error"].startswith('JSON Value: {"signature_name":[[[[')
    assert deep == 400 and instance["error"].startswith("instance 0: input 'text' must be a string")
    assert (broken, parse) == (400, {"error": "JSON Parse error: Unexpected '}'. at offset: 5006"})


def test_b64_trailing_bytes_and_both_formats_give_the_predictors_numbers(versions, expected):
    b64 = [{"b64": base64.b64encode(t.encode()).decode()} for t in TEXTS]
    unpadded = [{"b64": base64.b64encode(t.encode()).decode().rstrip("=")} for t in TEXTS]
    trailing = json.dumps({"instances": TEXTS}).encode() + b"\n}garbage"
    answers = _ask(
        _server(versions),
        ("POST", PREDICT, {"instances": b64}),
        ("POST", PREDICT, {"instances": [{"text": item} for item in unpadded]}),
        ("POST", PREDICT, {"inputs": {"text": b64}}),
        ("POST", PREDICT, {"inputs": b64}),
        ("POST", PREDICT, trailing),
        ("POST", PREDICT, {"signature_name": "", "instances": TEXTS}),
    )
    for status, _, answer in answers:
        assert status == 200, answer
        rows = answer.get("predictions") or [
            dict(zip(answer["outputs"], values, strict=True))
            for values in zip(*answer["outputs"].values(), strict=True)
        ]
        np.testing.assert_allclose([r["probabilities"] for r in rows], expected, atol=1e-5)


def test_what_the_model_refuses_is_a_400_with_tf_servings_body_never_a_500(versions):
    server = _server(versions)
    ids = {"signature_name": "classify_ids"}
    [(too_big, _, a), (outside, _, b)] = _ask(
        server,
        ("POST", PREDICT, {**ids, "instances": [_ids([2, 2**31, 3])]}),
        ("POST", PREDICT, {**ids, "instances": [_ids([2, 99999999, 3])]}),
    )
    checked, server.limits = server.limits, IdLimits()  # so the graph itself refuses
    try:
        [(refused, headers, c)] = _ask(
            server, ("POST", PREDICT, {**ids, "instances": [_ids([2, 99999999, 3])]})
        )
    finally:
        server.limits = checked
    assert (too_big, outside, refused) == (400, 400, 400)
    assert "has 2147483648 at position 1" in a["error"]
    assert "has 99999999 at position 1; ids must be in [0, 41)" in b["error"]
    assert "input_word_ids must be < 41 (the vocabulary size)" in c["error"]
    assert set(c) == {"error"} and headers["content-type"] == "application/json"


def test_floats_are_printed_as_tf_serving_prints_float32(versions):
    status, _, body = serving(
        _server(versions), lambda app: exchange(app, "POST", PREDICT, {"instances": TEXTS[:2]})
    )
    assert status == 200
    numbers = re.findall(rb"\"probabilities\": \[([^\]]*)\]", body)
    assert numbers
    for text in b", ".join(numbers).decode().split(", "):
        assert text == float32_text(np.float32(float(text))), text
    assert float32_text(0.2) == "0.2" and float32_text(np.float32(1)) == "1.0"
    assert float32_text(np.float32(0.7310586)) == "0.731058598"
    assert float32_text(1e-5) == "1e-05" and float32_text(3e7) == "3e+07"
    assert [float32_text(v) for v in (np.nan, np.inf, -np.inf)] == ["NaN", "Infinity", "-Infinity"]


def test_classify_answers_labels_and_scores_as_tf_serving(versions, expected, export_root):
    server = _server(versions)
    examples = [{"text": t} for t in TEXTS]
    answers = _ask(
        server,
        ("POST", "/v1/models/sst:classify", {"examples": examples}),
        (
            "POST",
            "/v1/models/sst/versions/1:classify",
            {"signature_name": "classify", "examples": examples},
        ),
        ("POST", "/v1/models/sst:classify", {"context": {"text": TEXTS[0]}, "examples": [{}, {}]}),
        ("POST", "/v1/models/sst:classify", {"examples": [{"txt": "a"}]}),
        ("POST", "/v1/models/sst:classify", {"examples": []}),
        ("POST", "/v1/models/sst:classify", {"instances": ["a"]}),
        (
            "POST",
            "/v1/models/sst:classify",
            {"signature_name": "serving_default", "examples": examples},
        ),
        ("POST", "/v1/models/sst:classify", {"examples": [{"text": None}]}),
        ("POST", "/v1/models/sst:regress", {"examples": examples}),
    )
    for status, _, body in answers[:2]:
        assert status == 200, body
        assert [[label for label, _ in row] for row in body["results"]] == [["neg", "pos"]] * 6
        np.testing.assert_allclose(
            [[score for _, score in row] for row in body["results"]], expected, atol=1e-5
        )
    assert answers[2][0] == 200
    np.testing.assert_allclose(
        [[s for _, s in row] for row in answers[2][2]["results"]], [expected[0]] * 2, atol=1e-5
    )
    messages = [body["error"] for status, _, body in answers[3:] if status == 400]
    assert len(messages) == 6
    assert "Feature: text (data type: string) is required but could not be found" in messages[0]
    assert "'examples' value is an empty array" in messages[1]
    assert "When method is classify, key 'examples' is expected and was not found" in messages[2]
    assert messages[3] == (
        "Expected classification signature method_name to be tensorflow/serving/classify. "
        "Was: tensorflow/serving/predict"
    )
    assert messages[4] == "Feature: text has element with unexpected JSON type: Null"
    assert messages[5] == "No signature was found with the name: regress"


def test_the_export_has_tf_servings_classify_signature(export_root, expected):
    from tensorflow.core.protobuf import saved_model_pb2

    version = export_root / "2"
    saved = saved_model_pb2.SavedModel.FromString((version / "saved_model.pb").read_bytes())
    signature = saved.meta_graphs[0].signature_def["classify"]
    assert signature.method_name == "tensorflow/serving/classify"
    assert set(signature.inputs) == {"inputs"} and set(signature.outputs) == {"classes", "scores"}
    import bertfit.text.ops  # noqa: F401

    loaded = tf.saved_model.load(str(version)).signatures["classify"]
    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[t.encode()]))
                }
            )
        ).SerializeToString()
        for t in TEXTS
    ]
    out = loaded(inputs=tf.constant(examples))
    np.testing.assert_allclose(out["scores"].numpy(), expected, atol=1e-5)
    assert out["classes"].numpy().tolist() == [[b"neg", b"pos"]] * len(TEXTS)


@pytest.fixture(scope="module")
def regression_server(regression_export):
    run, export = regression_export
    values = load_classifier(run).outputs(TEXTS)["value"]
    return ModelServer(None, "score", versions=served_versions(export)), values


def test_regress_and_a_lone_output_as_tf_serving(regression_server):
    server, values = regression_server
    examples = {"examples": [{"text": t} for t in TEXTS]}
    answers = _ask(
        server,
        ("POST", "/v1/models/score:regress", examples),
        ("POST", "/v1/models/score:predict", {"instances": TEXTS}),
        ("POST", "/v1/models/score:predict", {"inputs": TEXTS}),
        ("POST", "/v1/models/score:classify", examples),
    )
    assert all(status == 200 for status, _, _ in answers[:3]), answers
    np.testing.assert_allclose(answers[0][2]["results"], values, atol=1e-4)
    # One output: rows and columns are written without its name (MakeJsonFromTensors).
    np.testing.assert_allclose(answers[1][2]["predictions"], values, atol=1e-4)
    np.testing.assert_allclose(answers[2][2]["outputs"], values, atol=1e-4)
    assert answers[3][:1] == (400,)
    assert answers[3][2] == {"error": "No signature was found with the name: classify"}


def test_metadata_is_tf_servings_and_the_run_gives_the_exports(versions, run_dir):
    [(status, _, exported)] = _ask(_server(versions), ("GET", "/v1/models/sst/versions/2/metadata"))
    in_memory = ModelServer(load_classifier(run_dir), "sst", version=2)
    [(_, _, from_run)] = _ask(in_memory, ("GET", "/v1/models/sst/metadata"))
    assert status == 200 and exported == from_run
    assert set(exported) == {"model_spec", "metadata"}
    assert set(exported["metadata"]["signature_def"]) == {"signature_def"}  # no "@type"
    signatures = exported["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {
        "serving_default",
        "classify_ids",
        "classify",
        "__saved_model_init_op",
    }
    default = signatures["serving_default"]
    assert default["defaults"] == {} and default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["text"]["name"] == "serving_default_text:0"
    assert default["outputs"]["probabilities"] == {
        "dtype": "DT_FLOAT",
        "tensor_shape": {
            "dim": [{"size": "-1", "name": ""}, {"size": "2", "name": ""}],
            "unknown_rank": False,
        },
        "name": "StatefulPartitionedCall_2:2",
    }


def test_cors_preflight_and_headers(versions):
    origin = {"Origin": "https://example.com"}
    [plain_preflight, plain] = _ask(
        _server(versions), ("OPTIONS", PREDICT, None, origin), ("GET", "/v1/models/sst")
    )
    assert plain_preflight[0] == 200 and "access-control-allow-origin" not in plain_preflight[1]
    assert "access-control-allow-origin" not in plain[1]
    answers = _ask(
        _server(versions, enable_cors=True),
        ("OPTIONS", PREDICT, None, origin),
        ("OPTIONS", PREDICT),
        ("POST", PREDICT, {"instances": ["a"]}),
        ("GET", "/v1/foo"),
    )
    assert [status for status, _, _ in answers] == [200, 400, 200, 400]
    for _, headers, _ in answers:
        assert headers["access-control-allow-origin"] == "*"
        assert headers["access-control-allow-methods"] == "POST, GET"
        assert headers["access-control-allow-headers"] == "Content-Type"
    assert answers[0][2] == b"" and answers[1][2] == b""


def test_a_version_label_for_a_version_not_served_is_refused(versions):
    from bertfit.errors import ConfigError

    with pytest.raises(ConfigError, match="--version-labels canary=3: version 3 is not served"):
        _server(versions, version_labels={"canary": 3})


def test_the_serve_flags_for_labels_and_cors():
    from bertfit.cli import build_parser, serve_options

    parser = build_parser()
    args = parser.parse_args(
        ["serve", "--export", "x", "--version-labels", "stable=1,canary=2", "--enable-cors"]
    )
    options = serve_options(args)
    assert options.version_labels == {"stable": 1, "canary": 2} and options.enable_cors
    defaults = serve_options(parser.parse_args(["serve", "--export", "x"]))
    assert defaults.version_labels == {} and not defaults.enable_cors
    for wrong in ["stable", "stable=0", "stable=x", "a/b=1", "=1"]:
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--export", "x", "--version-labels", wrong])


@pytest.fixture(scope="module")
def pair_server(pair_classifier):
    classifier, expected = pair_classifier
    return ModelServer(classifier, "pair"), expected


def test_a_multi_label_pair_model_predicts_and_classifies_alike(pair_server):
    server, expected = pair_server
    pairs = list(zip(PAIR_TEXTS, PAIR_TEXTS[::-1], strict=True))
    rows = [
        {"text": a, "text_pair": {"b64": base64.b64encode(b.encode()).decode()}} for a, b in pairs
    ]
    examples = [{"text": a, "text_pair": [b]} for a, b in pairs]
    answers = _ask(
        server,
        ("POST", "/v1/models/pair:predict", {"instances": rows}),
        (
            "POST",
            "/v1/models/pair:predict",
            {"inputs": {"text": PAIR_TEXTS, "text_pair": PAIR_TEXTS[::-1]}},
        ),
        ("POST", "/v1/models/pair:classify", {"examples": examples}),
        (
            "POST",
            "/v1/models/pair:classify",
            {"context": {"text_pair": PAIR_TEXTS[0]}, "examples": [{"text": PAIR_TEXTS[-1]}]},
        ),
        ("POST", "/v1/models/pair:predict", {"instances": PAIR_TEXTS}),
        ("POST", "/v1/models/pair:predict", {"inputs": {"text": PAIR_TEXTS}}),
    )
    assert [status for status, _, _ in answers] == [200, 200, 200, 200, 400, 400], answers
    predictions = answers[0][2]["predictions"]
    assert set(predictions[0]) == {"labels", "predicted", "probabilities"}
    np.testing.assert_allclose([p["probabilities"] for p in predictions], expected, atol=1e-5)
    np.testing.assert_allclose(answers[1][2]["outputs"]["probabilities"], expected, atol=1e-5)
    results = answers[2][2]["results"]
    assert [[label for label, _ in row] for row in results] == [["a", "b", "c"]] * len(PAIR_TEXTS)
    np.testing.assert_allclose([[s for _, s in row] for row in results], expected, atol=1e-5)
    np.testing.assert_allclose([s for _, s in answers[3][2]["results"][0]], expected[-1], atol=1e-5)
    assert "instances is a plain list, but expecting list of objects" in answers[4][2]["error"]
    assert answers[5][2]["error"] == "Missing named input: text_pair in 'inputs' object."


def test_an_export_written_before_the_classify_signature_still_serves(run_dir, tmp_path):
    from bertfit.export.serving import save_module

    classifier = load_classifier(run_dir)
    functions = classifier.signatures()
    old = {name: functions[name] for name in ("serving_default", "classify_ids")}
    metadata = {k: v for k, v in classifier.metadata.items() if k != "version"}
    save_module(classifier.module, tmp_path, metadata, 1, old)
    server = ModelServer(None, "sst", versions=served_versions(tmp_path))
    answers = _ask(
        server,
        ("POST", PREDICT, {"instances": TEXTS}),
        ("POST", "/v1/models/sst:classify", {"examples": [{"text": TEXTS[0]}]}),
        ("GET", "/v1/models/sst/metadata"),
    )
    assert answers[0][0] == 200 and len(answers[0][2]["predictions"]) == len(TEXTS)
    assert answers[1][:1] == (400,)
    assert answers[1][2] == {"error": "No signature was found with the name: classify"}
    signatures = answers[2][2]["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "classify_ids", "__saved_model_init_op"}
