"""An mmBERT checkpoint (a ModernBERT with Gemma's BPE with byte fallback), as `save_pretrained`
writes it, trains through the CLI and exports with its tokenizer inside the SavedModel, and to
ONNX with its tokenizer.json (bytes falling back alike); LiteRT, whose tokenizer kernels are
WordPiece's, refuses it before writing anything."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit import load_classifier
from bertfit.cli import main
from tests.export.runtimes import ONNX_CLIENT, run_client
from tests.families import write_family_checkpoint
from tests.tiny import sentiment_rows, train_args, write_csv

pytest.importorskip("transformers")


@pytest.mark.slow  # one epoch of a tiny model, an export: the one mmBERT run of the suite
def test_an_mmbert_checkpoint_trains_and_exports_its_tokenizer(tmp_path, capsys):
    rows = sentiment_rows(32)
    write_family_checkpoint("mmbert", tmp_path / "mmbert", [text for text, _ in rows])
    train = write_csv(tmp_path / "train.csv", rows)
    run, export = tmp_path / "run", tmp_path / "export"
    assert main(train_args(tmp_path / "mmbert", train, run)) == 0
    assert main(["export", "--run", str(run), str(export)]) == 0
    texts = ["a good film", "Ça, c'est NUL! 中文", "", "good " * 30]  # bytes fall back
    serve = tf.saved_model.load(str(export / "1")).signatures["serving_default"]
    exported = serve(text=tf.constant(texts))["probabilities"].numpy()
    expected = load_classifier(str(run)).predict_proba(texts)
    np.testing.assert_allclose(exported, expected, atol=1e-5)

    onnx = tmp_path / "onnx"
    assert main(["export", "--run", str(run), str(onnx), "--format", "onnx"]) == 0
    got = run_client(ONNX_CLIENT, onnx / "1", texts, tmp_path)
    np.testing.assert_allclose(got, expected, atol=1e-5)

    capsys.readouterr()
    litert = tmp_path / "litert"
    assert main(["export", "--run", str(run), str(litert), "--format", "litert"]) == 2
    assert "needs a WordPiece (BERT-style) tokenizer: LiteRT's" in capsys.readouterr().err
    assert not litert.exists()
