"""What the portable exports refuse, and what they say to do instead."""

from __future__ import annotations

import errno
import types

import pytest
import tensorflow as tf

from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.export.litert import export_litert
from bertfit.export.portable import ExportWriteError, write_export
from bertfit.inference.graph import ClassifierModule
from bertfit.model.classifier import BertClassifier
from tests.tiny import sentiment_rows, tiny_encoder


def _classifier(tokenizer, pairs: bool = False):
    model = BertClassifier(tiny_encoder(), 2, dropout=0.0)
    task = Task("single-label", ("neg", "pos"))
    module = ClassifierModule(model, tokenizer, task, 16, [16], pairs)
    return types.SimpleNamespace(module=module)


@pytest.mark.slow  # trains a sentencepiece model: seconds
def test_a_sentencepiece_run_is_refused_by_litert_and_packed_by_onnxs_tokenizer_json(tmp_path):
    """XLM-R's bare sentencepiece file, whose ids bertfit shifts to fairseq's: LiteRT says why
    it cannot hold it; ONNX's tokenizer.json gives the in-graph ids."""
    pytest.importorskip("sentencepiece")
    from bertfit.export.onnx import tokenizer_file
    from bertfit.text.loading import load_tokenizer
    from tests.export.runtimes import assert_tokenizer_json_packs_as
    from tests.text.sentencepiece_files import write_family

    corpus = tmp_path / "corpus.txt"
    texts = [text for text, _ in sentiment_rows(200)]
    corpus.write_text("\n".join(texts))
    tokenizer = load_tokenizer(write_family(tmp_path, "xlm-roberta", corpus, 40)[0])
    assert tokenizer.kind == "sentencepiece"
    classifier = _classifier(tokenizer)
    with pytest.raises(ConfigError, match="kernels are TensorFlow Text's FastBertTokenizer's"):
        export_litert(classifier, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    packing = tokenizer_file(tokenizer, 16)
    assert_tokenizer_json_packs_as(packing, tokenizer, 16, [*texts[:20], "", "x " * 30])


def test_litert_refuses_a_pair_model_and_names_onnx(tmp_path):
    from bertfit.text.tokenizer import BertTokenizer
    from tests.tiny import TINY_VOCAB

    with pytest.raises(ConfigError, match="text pairs. Use --format onnx"):
        export_litert(_classifier(BertTokenizer(TINY_VOCAB), pairs=True), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        tf.errors.ResourceExhaustedError(None, None, "No space left on device"),  # TF's writers
    ],
)
def test_a_full_disk_during_an_export_leaves_nothing_and_says_so_in_one_line(tmp_path, error):
    def write(folder):
        (folder / "variables").mkdir()
        (folder / "variables" / "variables.data-00000-of-00001").write_bytes(b"\0" * 1000)
        raise error

    with pytest.raises(ExportWriteError, match=r"out/1 \(No space left on device\); the partial"):
        write_export(tmp_path / "out", None, write)
    assert not (tmp_path / "out").exists()  # the folder it created, removed
    (tmp_path / "kept").mkdir()
    with pytest.raises(ExportWriteError):
        write_export(tmp_path / "kept", None, write)
    assert list((tmp_path / "kept").iterdir()) == []  # an existing folder stays, empty
