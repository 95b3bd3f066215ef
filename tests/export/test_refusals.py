"""What the portable exports refuse, and what they say to do instead."""

from __future__ import annotations

import errno
import types

import pytest
import tensorflow as tf

from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.export.litert import export_litert
from bertfit.export.onnx import export_onnx
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
def test_a_sentencepiece_run_is_refused_by_both_formats(tmp_path):
    pytest.importorskip("sentencepiece")
    from bertfit.text.loading import load_tokenizer
    from tests.text.sentencepiece_files import write_family

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(text for text, _ in sentiment_rows(200)))
    tokenizer = load_tokenizer(write_family(tmp_path, "xlm-roberta", corpus, 40)[1])
    assert tokenizer.kind == "sentencepiece"
    for export in (export_litert, export_onnx):
        with pytest.raises(ConfigError, match="needs a WordPiece .* --format saved-model"):
            export(_classifier(tokenizer), tmp_path / "out")
    assert not (tmp_path / "out").exists()


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
