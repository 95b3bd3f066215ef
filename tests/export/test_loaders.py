"""Every SavedModel bertfit writes runs in each of TensorFlow's loaders (issue 44):
`tf.saved_model.load`, the TF1 Session loader, and C++ `LoadSavedModel` + `Session::Run` (the
path `tensorflow_model_server` takes; tests/export/loaders.py). Each signature answers as
bertfit does in memory, within 1e-5: the serving export of every task, of text pairs, of a
chunk run and of each tokenizer family as the predictor (`bertfit predict`) does; `bertfit
convert --to tf-hub`'s encoder and preprocessor as bertfit's encoder and tokenizer do. The
families of issue 57 also export, from the same classifiers, as ONNX (every tokenizer kind) and
LiteRT (WordPiece's)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.load import load_encoder
from bertfit.cli import main
from bertfit.data.tasks import Task
from bertfit.export.litert import export_litert
from bertfit.export.onnx import export_onnx
from bertfit.export.serving import export_classifier
from bertfit.inference.graph import (
    CLASSIFY_SIGNATURE,
    DEFAULT_SIGNATURE,
    IDS_SIGNATURE,
    REGRESS_SIGNATURE,
    ClassifierModule,
)
from bertfit.inference.predictor import Classifier, load_classifier
from bertfit.model.classifier import BertClassifier
from bertfit.text.tokenizer import BertTokenizer
from tests.export.loaders import (
    assert_same_outputs,
    run_in_cxx,
    run_in_session,
    run_loaded,
)
from tests.export.runtimes import (
    LITERT_CLIENT,
    ONNX_CLIENT,
    assert_tokenizer_json_packs_as,
    run_client,
)
from tests.families import write_family_checkpoint
from tests.long_documents import DOCUMENTS, chunk_classifier
from tests.tiny import TINY_VOCAB, sentiment_rows, tiny_encoder

# Builds several exports and loads each three ways (one a C++ process): seconds per test.
pytestmark = pytest.mark.slow

LOADERS = ("tf.saved_model.load", "session", "c++")
TEXTS = [text for text, _ in sentiment_rows(12, seed=4)] + ["", "naïve déjà-vu?!", "good " * 30]
PAIRS = TEXTS[::-1]
# The serving exports: the trained run through `bertfit export`, and models built in memory.
SERVING = ("single-label", "multi-label-pairs", "chunk-regression", "sentencepiece", "bpe")
# The families of issue 57 with layers of their own; GTE's are NomicBERT's (`rotary_glu`) and
# its tokenizer the "sentencepiece" kind's, so its export would check nothing new.
SERVING += ("mpnet", "nomic_bert", "eurobert")
# Those ONNX and LiteRT both take: WordPiece runs (LiteRT's tokenizer kernels are WordPiece's).
PORTABLE = ("mpnet", "nomic_bert")
# Those ONNX alone takes: a SentencePiece run (DeBERTa-v3) and a byte-level BPE run (EuroBERT:
# Llama 3's split and special tokens, layers of its own). A ModernBERT encoder with a BPE of byte
# fallback exports through the CLI in tests/training/test_mmbert.py; every family's tokenizer
# packs alike in its tokenizer.json in tests/text/test_host_tokenizer.py.
ONNX_ONLY = ("sentencepiece", "eurobert")
HUB = ("bert", "deberta-v2")  # TF Hub encoders in plain TF ops (BERT) and as Keras layers
FAMILY_OF = {"sentencepiece": "deberta-v2", "bpe": "modernbert"} | {f: f for f in SERVING[5:]}


def run(loader: str, export, requests: dict, runner, tmp_path) -> dict:
    """`loader`'s answers to `requests` (`runner`: the C++ runner's future)."""
    if loader == "tf.saved_model.load":
        return run_loaded(export, requests)
    if loader == "session":
        return run_in_session(export, requests)
    return run_in_cxx(runner.result(), export, requests, tmp_path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """`checkpoints(family)`: a tiny random checkpoint of `family` (written once)."""
    done = {}

    def checkpoint(family: str):
        if family not in done:
            done[family] = tmp_path_factory.mktemp(family)
            texts = [text for text, _ in sentiment_rows(60)]
            write_family_checkpoint(family, done[family], texts, trainable=False)
        return done[family]

    return checkpoint


def in_memory(kind: str, checkpoints, folder) -> Classifier:
    """An untrained classifier of `kind` (random weights: outputs differ from row to row)."""
    if kind == "chunk-regression":
        return chunk_classifier(folder, task=Task("regression", mean=3.0, std=2.0))
    task = (
        Task("multi-label", ("a", "b", "c"), threshold=0.4)
        if kind == "multi-label-pairs"
        else Task("single-label", ("neg", "neutral", "pos"))
    )
    if kind not in FAMILY_OF:
        encoder, tokenizer = tiny_encoder(seed=3), BertTokenizer(TINY_VOCAB)
        model = BertClassifier(encoder, task.num_outputs, dropout=0.0)
    else:
        encoder, tokenizer = load_encoder(checkpoints(FAMILY_OF[kind]))
        model = BertClassifier(encoder, task.num_outputs, pooling="mean", dropout=0.0)
        encoder_weights = {id(v) for v in encoder.weights}
        rng = np.random.default_rng(0)
        for variable in model.weights:  # a head far from uniform, so the rows differ
            if id(variable) not in encoder_weights:
                variable.assign(rng.normal(0, 1.0, variable.shape).astype("float32"))
    pairs = kind == "multi-label-pairs"
    module = ClassifierModule(model, tokenizer, task, 16, [8, 16], pairs=pairs)
    return Classifier(module, {"task": task.to_dict(), "pairs": pairs})


def tf_examples(columns: dict[str, list[str]]) -> np.ndarray:
    """Serialized `tf.train.Example`s, one per row, with a bytes feature per column: the input
    of TF Serving's Classify and Regress APIs."""

    def example(values) -> bytes:
        feature = {
            name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
            for name, value in zip(columns, values, strict=True)
        }
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    return np.array([example(values) for values in zip(*columns.values(), strict=True)], object)


def serving_requests(classifier: Classifier) -> tuple[dict, dict]:
    """(requests for every signature of `classifier`'s export, the answers bertfit gives in
    memory: the predictor's outputs, and `classify_ids` on the ids its tokenizer packs)."""
    module, task = classifier.module, classifier.task
    texts = DOCUMENTS if classifier.windows is not None else TEXTS
    pairs = PAIRS if classifier.pairs else None
    columns = {"text": texts, **({"text_pair": pairs} if pairs else {})}
    outputs = classifier.outputs(texts, pairs)
    ids = module.tokenizer(texts, pairs, max_seq_length=module.max_seq_length, padding="longest")
    requests = {
        DEFAULT_SIGNATURE: {name: np.array(c, object) for name, c in columns.items()},
        IDS_SIGNATURE: {name: value.numpy() for name, value in ids.items()},
    }
    expected = {
        DEFAULT_SIGNATURE: outputs,
        IDS_SIGNATURE: {k: v.numpy() for k, v in module.classify_ids(**ids).items()},
    }
    if task.kind == "regression":
        requests[REGRESS_SIGNATURE] = {"inputs": tf_examples(columns)}
        expected[REGRESS_SIGNATURE] = {"outputs": outputs["value"]}
    else:
        requests[CLASSIFY_SIGNATURE] = {"inputs": tf_examples(columns)}
        scores = outputs["probabilities"]
        classes = np.broadcast_to(np.array(task.labels, object), scores.shape)
        expected[CLASSIFY_SIGNATURE] = {"classes": classes, "scores": scores}
    return requests, expected


@pytest.fixture(scope="module")
def classifiers(checkpoints, tmp_path_factory):
    """`classifiers(kind)`: the in-memory classifier of `kind` (`in_memory`), made once for
    every export of it."""
    done = {}

    def classifier(kind: str) -> Classifier:
        if kind not in done:
            done[kind] = in_memory(kind, checkpoints, tmp_path_factory.mktemp(kind))
        return done[kind]

    return classifier


@pytest.fixture(scope="module")
def serving_exports(request, classifiers, tmp_path_factory):
    """`serving_exports(kind)`: (the export's version folder, requests, expected answers)."""
    done = {}

    def export(kind: str):
        if kind not in done:
            if kind == "single-label":  # trained, and written by the CLI
                folder = request.getfixturevalue("portable_export")("saved-model")
                run_dir = request.getfixturevalue("trained_run")[1].run_dir
                classifier = load_classifier(run_dir)
            else:
                classifier = classifiers(kind)
                folder = export_classifier(classifier, tmp_path_factory.mktemp(f"{kind}-export"))
            done[kind] = (folder, *serving_requests(classifier))
        return done[kind]

    return export


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("kind", SERVING)
def test_the_serving_export_answers_as_the_predictor(
    kind, loader, serving_exports, saved_model_runner, tmp_path
):
    folder, requests, expected = serving_exports(kind)
    assert_same_outputs(run(loader, folder, requests, saved_model_runner, tmp_path), expected)


@pytest.mark.parametrize("family", PORTABLE)
def test_the_families_onnx_and_litert_exports_answer_as_the_predictor(
    family, classifiers, tmp_path
):
    """The classifier whose SavedModel the loaders run, exported as ONNX (tokenizer.json
    beside) and LiteRT: each runtime, in a process without TensorFlow or bertfit, gives
    bertfit's probabilities."""
    classifier = classifiers(family)
    expected = classifier.predict_proba(TEXTS)
    assert np.ptp(expected, axis=0).max() > 1e-3  # rows differ: a test of the inputs too
    for client, export in (
        (ONNX_CLIENT, export_onnx(classifier, tmp_path / "onnx")),
        (LITERT_CLIENT, export_litert(classifier, tmp_path / "litert")),
    ):
        got = run_client(client, export, TEXTS, tmp_path)
        np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("kind", ONNX_ONLY)
def test_the_other_tokenizer_kinds_export_to_onnx_and_answer_as_the_predictor(
    kind, classifiers, tmp_path
):
    """The ONNX export of a run whose tokenizer is not WordPiece: its tokenizer.json packs
    texts and pairs as the in-graph tokenizer does, and ONNX Runtime, in a process without
    TensorFlow or bertfit, gives bertfit's probabilities."""
    import tokenizers

    classifier = classifiers(kind)
    expected = classifier.predict_proba(TEXTS)
    assert np.ptp(expected, axis=0).max() > 1e-3  # rows differ: a test of the inputs too
    export = export_onnx(classifier, tmp_path / "onnx")
    tokenizer = tokenizers.Tokenizer.from_file(str(export / "tokenizer.json"))
    module = classifier.module
    assert_tokenizer_json_packs_as(tokenizer, module.tokenizer, module.max_seq_length, TEXTS)
    got = run_client(ONNX_CLIENT, export, TEXTS, tmp_path)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.fixture(scope="module")
def hub_exports(checkpoints, tmp_path_factory):
    """`hub_exports(family)`: `bertfit convert --to tf-hub`'s folder, with requests and the
    answers of bertfit's encoder and tokenizer for its `encoder` and `preprocess`."""
    done = {}

    def export(family: str):
        if family not in done:
            source = checkpoints(family)
            folder = tmp_path_factory.mktemp(f"{family}-hub")
            argv = ["convert", str(source), str(folder), "--to", "tf-hub", "--seq-length", "16"]
            assert main(argv) == 0
            encoder, tokenizer = load_encoder(source)
            ids = {k: v.numpy() for k, v in tokenizer(TEXTS, max_seq_length=16).items()}
            outputs = {k: v.numpy() for k, v in encoder(ids).items() if k != "encoder_outputs"}
            # TF Hub's `default`: the pooled output, or [CLS]'s vector for a family without one
            outputs["default"] = outputs.get("pooled_output", outputs["sequence_output"][:, 0])
            done[family] = (
                {
                    "encoder": ({DEFAULT_SIGNATURE: ids}, {DEFAULT_SIGNATURE: outputs}),
                    "preprocess": (
                        {DEFAULT_SIGNATURE: {"sentences": np.array(TEXTS, object)}},
                        {DEFAULT_SIGNATURE: ids},
                    ),
                },
                folder,
            )
        return done[family]

    return export


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("part", ["encoder", "preprocess"])
@pytest.mark.parametrize("family", HUB)
def test_the_tf_hub_export_answers_as_bertfit(
    family, part, loader, hub_exports, saved_model_runner, tmp_path
):
    cases, folder = hub_exports(family)
    requests, expected = cases[part]
    assert_same_outputs(
        run(loader, folder / part, requests, saved_model_runner, tmp_path), expected
    )


def test_an_export_written_before_issue_44_runs_once_exported_again(tmp_path, monkeypatch):
    """Exports written before the fix held the Keras model as a plain attribute (rebuilt here):
    TF Serving's loader fails on them; `bertfit export --run OLD NEW` rewrites one that runs."""
    with monkeypatch.context() as patch:  # bertfit's ClassifierModule before the fix
        patch.setattr("bertfit.inference.graph.hold_keras_model", setattr)
        classifier = in_memory("multi-label-pairs", None, tmp_path)
    old = export_classifier(classifier, tmp_path / "old")
    requests, expected = serving_requests(classifier)
    with pytest.raises(tf.errors.FailedPreconditionError, match="Could not find variable"):
        run_in_session(old, requests)
    assert main(["export", "--run", str(old.parent), str(tmp_path / "new")]) == 0
    assert_same_outputs(run_in_session(tmp_path / "new" / "1", requests), expected)
