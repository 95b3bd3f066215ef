"""The onnx engine's `classify_batch` (what `bertfit serve` calls with a batch of whatever texts
arrived together): model calls of texts of similar lengths, rows back in the order given, lanes
of calls at once. The model is a hand-made ONNX graph whose "probabilities" are each row's
tokens and the width its call padded it to, so the calls show in the outputs (milliseconds:
no conversion)."""

from __future__ import annotations

import json
import threading

import onnx
import pytest
from onnx import TensorProto, helper
from tokenizers import Tokenizer, models, pre_tokenizers

from bertfit.data.tasks import Task
from bertfit.inference.onnx_runtime import INPUT_NAMES, OnnxClassifier


@pytest.fixture(scope="module")
def width_export(tmp_path_factory):
    """An ONNX export folder whose model answers [tokens of the row, width of the call]."""
    folder = tmp_path_factory.mktemp("width-onnx")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["n", "w"]) for n in INPUT_NAMES]
    nodes = [
        helper.make_node("Shape", ["input_mask"], ["rows"], end=1),
        helper.make_node("Concat", ["rows", "one"], ["column"], axis=0),
        helper.make_node("ReduceSum", ["input_mask", "axis"], ["tokens"], keepdims=1),
        helper.make_node("Shape", ["input_mask"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["width"]),
        helper.make_node("Expand", ["width", "column"], ["widths"]),
        helper.make_node("Concat", ["tokens", "widths"], ["both"], axis=1),
        helper.make_node("Cast", ["both"], ["probabilities"], to=TensorProto.FLOAT),
    ]
    constants = [
        helper.make_tensor("axis", TensorProto.INT64, [1], [1]),
        helper.make_tensor("one", TensorProto.INT64, [1], [1]),
    ]
    output = helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", 2])
    graph = helper.make_graph(nodes, "width", inputs, [output], initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, folder / "model.onnx")
    tokenizer = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    metadata = {
        "format": "onnx",
        "task": Task("single-label", ("short", "long")).to_dict(),
        "output": "probabilities",
        "tokenizer": "tokenizer.json",
    }
    (folder / "bertfit.json").write_text(json.dumps(metadata))
    return folder


TOKENS = [30, 2, 31, 3, 29, 1]
TEXTS = ["a " * n for n in TOKENS]


def test_a_batch_of_short_and_long_texts_runs_as_calls_of_similar_lengths(width_export):
    rows = OnnxClassifier(width_export).classify_batch(TEXTS)["probabilities"]
    assert rows[:, 0].tolist() == TOKENS  # in the order given
    assert rows[:, 1].tolist() == [31, 3, 31, 3, 31, 3]  # a short text is not padded to 31


def test_lanes_of_calls_run_at_once_with_rows_in_the_order_given(width_export):
    engine = OnnxClassifier(width_export, threads=1, calls=2)
    # The first call of each lane must meet the other's: a lane's next call comes after.
    first_two = threading.Barrier(2, timeout=10)  # broken unless two calls run at once
    calls, run = [], engine.session.run

    def meeting_run(*args):
        calls.append(args)
        if len(calls) <= 2:
            first_two.wait()
        return run(*args)

    engine.session = type("Session", (), {"run": staticmethod(meeting_run)})()
    rows = engine.classify_batch(TEXTS)["probabilities"]
    # The lanes share the tokens: [1, 2, 3] then [29] in one, [30, 31] in the other.
    assert len(calls) == 3
    assert rows[:, 0].tolist() == TOKENS
    assert rows[:, 1].tolist() == [31, 3, 31, 3, 29, 3]
