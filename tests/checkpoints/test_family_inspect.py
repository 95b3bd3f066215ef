"""`bertfit inspect` says what a checkpoint of any family is: family, size, tokenizer, whether it
fine-tunes; an unsupported family gets one sentence, not a list of missing tensors."""

from __future__ import annotations

import json

import pytest

from bertfit.cli import main
from tests.families import write_family_checkpoint
from tests.tiny import sentiment_rows

pytest.importorskip("transformers")

TEXTS = [text for text, _ in sentiment_rows(60)]


@pytest.mark.parametrize(
    ("family", "name", "tokenizer"),
    [
        ("electra", "ELECTRA", "wordpiece"),
        ("distilbert", "DistilBERT", "wordpiece"),
        ("albert", "ALBERT", "sentencepiece"),
        ("deberta-v2", "DeBERTa-v3", "sentencepiece"),
        ("roberta", "RoBERTa", "bpe"),
    ],
)
def test_inspect_names_the_family_and_its_tokenizer(family, name, tokenizer, tmp_path, capsys):
    write_family_checkpoint(family, tmp_path, TEXTS)
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == name
    assert report["tokenizer"] == tokenizer
    assert report["fine_tunable"] is True
    assert report["parameters"] > 1000
    assert ("pooled_output" in report["outputs"]) == (family in ("albert", "roberta"))
    assert main(["inspect", str(tmp_path)]) == 0
    assert f"family:        {name}" in capsys.readouterr().out


def test_an_unsupported_family_is_one_sentence(tmp_path, capsys):
    write_family_checkpoint("bert", tmp_path, TEXTS)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "longformer"}))
    main(["inspect", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["fine_tunable"] is False
    (note,) = report["notes"]
    assert "'longformer' model" in note and "ModernBERT" in note and len(note) < 400
