"""A student with a pruned vocabulary (`bertfit distill --prune-vocab`) in the portable exports:
ONNX and LiteRT take the ids of the teacher's whole vocabulary and renumber them inside the
model, the hf folder holds the whole vocabulary's embedding table ([UNK]'s row for each id not
kept). Each, run by its own runtime, gives the student's `predict_proba`, a word its rows never
used reading as [UNK]; so does `predict --engine onnx`, on the ONNX export and on the run."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.export.onnx_engine import CACHE_DIR
from tests.export.runtimes import LITERT_CLIENT, ONNX_CLIENT, run_client
from tests.tiny import write_csv

# Export, convert and run a process per test: seconds each (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
# "?" is in the teacher's vocabulary and in none of the student's rows: it reads as [UNK], as
# "zebra" (in no vocabulary) does; "fun" is kept.
NOT_KEPT, UNKNOWN, KEPT = "the film ?", "the film zebra", "the film fun"
TEXTS = [NOT_KEPT, UNKNOWN, KEPT, "bad film !", "an awful , boring plot ?", "the good film " * 12]


@pytest.fixture(scope="module")
def student(pruned_student):
    from bertfit.inference.predictor import Classifier

    return Classifier.from_run(pruned_student)


@pytest.fixture(scope="module")
def expected(student) -> np.ndarray:
    return student.predict_proba(TEXTS)


def test_the_texts_hold_a_word_not_kept_whose_reading_shows(student, expected):
    """The premise of the tests below: "?" is a token of the whole vocabulary that the pruned
    one reads as [UNK], and a token read otherwise would change the probabilities."""
    tokenizer = student.module.tokenizer
    assert tokenizer.tokenizer.tokenize("?").numpy() != [tokenizer.tokenizer.unk_id]
    assert tokenizer.tokenize("?").numpy() == [tokenizer.unk_id]
    np.testing.assert_array_equal(expected[0], expected[1])
    assert np.abs(expected[0] - expected[2]).max() > 10 * TOLERANCE


def test_onnx_takes_the_teachers_ids_and_gives_the_students_probabilities(
    pruned_student, student, expected, tmp_path
):
    import tokenizers

    from bertfit.export.onnx import export_onnx

    folder = export_onnx(student, tmp_path / "onnx")
    whole = student.module.tokenizer.tokenizer
    tokenizer_json = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    question = int(whole.tokenize("?").numpy()[0])
    assert tokenizer_json.encode("?").ids == [whole.cls_id, question, whole.sep_id]
    got = run_client(ONNX_CLIENT, folder, TEXTS, tmp_path)
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE)

    # --engine onnx on the export, and on the run (whose export the engine makes)
    run = shutil.copytree(pruned_student, tmp_path / "run")
    data = write_csv(tmp_path / "texts.csv", [[text] for text in TEXTS], header=["text"])
    for source in (folder, run):
        argv = ["predict", "--engine", "onnx", "--run", str(source), "--data", str(data)]
        assert main([*argv, "--output", str(tmp_path / "predicted.csv"), "--quiet"]) == 0
        with open(tmp_path / "predicted.csv", newline="", encoding="utf-8") as f:
            rows = [json.loads(row["probabilities"]) for row in csv.DictReader(f)]
        predicted = np.array([[row[label] for label in student.labels] for row in rows])
        np.testing.assert_allclose(predicted, expected, rtol=0, atol=TOLERANCE, err_msg=source)
    assert (run / CACHE_DIR).is_dir()


def test_litert_gives_the_students_probabilities(student, expected, tmp_path):
    from bertfit.export.litert import export_litert

    got = run_client(LITERT_CLIENT, export_litert(student, tmp_path / "litert"), TEXTS, tmp_path)
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE)


def test_hf_holds_the_whole_vocabulary_and_gives_the_students_probabilities(
    student, expected, tmp_path
):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bertfit.export.hf import export_hf

    folder = export_hf(student, tmp_path / "hf")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    whole = student.module.tokenizer.tokenizer
    rows = model.get_input_embeddings().weight.detach().numpy()
    assert len(rows) == whole.vocab_size
    question = int(whole.tokenize("?").numpy()[0])
    np.testing.assert_array_equal(rows[question], rows[whole.unk_id])
    with torch.no_grad():
        encoded = tokenizer(TEXTS, padding=True, truncation=True, return_tensors="pt")
        got = model(**encoded).logits.softmax(-1).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE)
