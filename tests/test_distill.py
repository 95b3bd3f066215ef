"""`bertfit distill`: the student cut from the teacher's layers, the teacher's labels file, the
distillation loss, a whole distillation on the tiny model, and the mistakes that exit 2."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.distill.config import DistillConfig, chosen_layers
from bertfit.errors import BertfitError, ConfigError


def test_a_count_of_layers_keeps_them_evenly_spaced_from_the_first():
    assert chosen_layers("3", 6) == [0, 2, 4]
    assert chosen_layers("2", 12) == [0, 6]
    assert chosen_layers(None, 6) == [0, 2, 4]  # half, rounded up
    assert chosen_layers(None, 3) == [0, 1]
    assert chosen_layers("0,3,5", 6) == [0, 3, 5]


def test_a_student_from_its_own_checkpoint_pools_as_that_checkpoint_declares():
    """The teacher's pooling was decided for the teacher's checkpoint (issue 56): a student
    of its layers keeps it; one from --student-model leaves it to that checkpoint, unless
    --pooling is given."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig
    from bertfit.distill.config import student_config

    teacher = RunConfig(
        model=ModelConfig(name="minilm-l6", pooling="mean"), data=DataConfig(train="t.csv")
    )
    assert student_config(teacher, "s", {}).model.pooling == "mean"
    assert student_config(teacher, "s", {}, "path/to/bert").model.pooling is None
    flags = {"model.pooling": "cls"}
    assert student_config(teacher, "s", flags, "path/to/bert").model.pooling == "cls"
    assert teacher.model.pooling == "mean"  # the teacher's config is left as it was


def test_a_schedule_chosen_for_the_teachers_small_set_is_chosen_again_for_the_student():
    """With --unlabelled the distillation set may be far larger than the teacher's 16 rows,
    for which 30 epochs at batch 8 were chosen (issue 63); a schedule given is kept."""
    from bertfit.config import DataConfig, RunConfig, TrainConfig
    from bertfit.distill.config import student_config

    teacher = RunConfig(data=DataConfig(train="t.csv"), train=TrainConfig(batch_size=8, epochs=30))
    kept = student_config(teacher, "s", {}).train
    assert (kept.batch_size, kept.epochs) == (8, 30)
    chosen = student_config(teacher, "s", {}, chosen_schedule=True).train
    assert (chosen.batch_size, chosen.epochs) == (None, None)
    flags = {"train.epochs": 2}
    assert student_config(teacher, "s", flags, chosen_schedule=True).train.epochs == 2


@pytest.mark.parametrize(
    "choice, words",
    [
        ("6", "keeps 1 to 5 of them"),
        ("0", "keeps 1 to 5 of them"),
        ("2,1", "must increase"),
        ("0,6", "below the teacher's 6 layers"),
        ("0,1,2,3,4,5", "keeps every layer"),
        ("three", "expected a count"),
    ],
)
def test_a_layer_choice_the_teacher_cannot_give_is_refused(choice, words):
    with pytest.raises(ConfigError, match=words):
        chosen_layers(choice, 6)


@pytest.mark.parametrize(
    "options, words",
    [
        (DistillConfig(), "--teacher RUN is required"),
        (DistillConfig(teacher="t", temperature=0), "--temperature must be above 0"),
        (DistillConfig(teacher="t", soft_weight=1.5), "--soft-weight must be between 0 and 1"),
        (DistillConfig(teacher="t", student_layers="1", student_model="m"), "pass one"),
        (
            DistillConfig(teacher="t", student_model="m", student_intermediate_size=8),
            "--student-intermediate-size narrows a student cut from the teacher",
        ),
        (DistillConfig(teacher="t", student_intermediate_size=0), "must be at least 1"),
        (DistillConfig(teacher="t", augment=-1), "--augment must be 0 or more copies"),
    ],
)
def test_settings_out_of_range_are_refused(options, words):
    with pytest.raises(ConfigError, match=words):
        options.validate()


def test_the_loss_is_the_hand_computed_mix_of_soft_and_hard_terms():
    from keras import ops

    from bertfit.distill.loss import UNLABELLED, distillation_targets, per_example_loss

    teacher = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    logits = np.array([[1.0, 0.5, -1.0], [0.2, -0.3, 0.9]], np.float32)
    t, w = 2.0, 0.25
    targets = distillation_targets(teacher, np.array([0, UNLABELLED]), t)
    got = ops.convert_to_numpy(per_example_loss(targets, logits, t, w))

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    expected = []
    for row, (p, z) in enumerate(zip(teacher, logits.astype(np.float64), strict=True)):
        p_t = p ** (1 / t) / (p ** (1 / t)).sum()
        soft = t * t * np.sum(p_t * (np.log(p_t) - np.log(softmax(z / t))))
        hard = -np.log(softmax(z)[0])
        expected.append(w * soft + (1 - w) * hard if row == 0 else soft)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # the teacher's own logits at T cost nothing but the hard term
    same = per_example_loss(targets[1:], np.log(teacher[1:]), t, w)
    np.testing.assert_allclose(ops.convert_to_numpy(same), [0.0], atol=1e-5)


def test_the_soft_labels_file_reads_back_and_a_broken_one_is_refused(tmp_path):
    from bertfit.distill.soft_labels import SoftLabels

    written = SoftLabels(
        np.array([[0.9, 0.1], [0.3, 0.7]], np.float32), np.array([1, -1]), ["neg", "pos"], "ab12"
    )
    written.save(tmp_path / "soft.npz")
    read = SoftLabels.load(tmp_path / "soft.npz")
    np.testing.assert_array_equal(read.probabilities, written.probabilities)
    np.testing.assert_array_equal(read.given, [1, -1])
    assert (read.labels, read.fingerprint) == (["neg", "pos"], "ab12")
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(BertfitError, match="broken.npz is not a soft-labels file"):
        SoftLabels.load(tmp_path / "broken.npz")


def test_the_student_starts_from_the_teachers_chosen_layers_bitwise(trained_run, tmp_path):
    from bertfit.checkpoints.load import build_encoder, read_checkpoint
    from bertfit.distill.student import write_student
    from bertfit.distill.teacher import load_teacher
    from bertfit.training.run_dir import TrainingRunDir as RunDir

    run = trained_run[1].run_dir
    teacher = load_teacher(run, "tensorflow").encoder
    path = write_student(teacher, RunDir(run).tokenizer_dir, [1], tmp_path / "student")
    student = build_encoder(read_checkpoint(path))
    assert student.config.num_hidden_layers == 1
    ours, theirs = student.named_variables(), teacher.named_variables()
    # every tensor but the teacher's layer 0: its layer 1 is the student's layer 0
    expected = {k.replace("layer_1/", "layer_0/") for k in theirs if not k.startswith("layer_0/")}
    assert set(ours) == expected
    for name, variable in ours.items():
        source = name.replace("layer_0/", "layer_1/")
        np.testing.assert_array_equal(variable.numpy(), theirs[source].numpy(), err_msg=name)


def test_a_pruned_student_keeps_the_teachers_embedding_rows_of_the_kept_ids(trained_run, tmp_path):
    from bertfit.checkpoints.load import build_encoder, build_tokenizer, read_checkpoint
    from bertfit.distill.student import write_student
    from bertfit.distill.teacher import load_teacher
    from bertfit.training.run_dir import TrainingRunDir as RunDir
    from tests.tiny import TINY_VOCAB

    run = trained_run[1].run_dir
    teacher = load_teacher(run, "tensorflow").encoder
    kept = np.array([0, 1, 2, 3, 4, TINY_VOCAB.index("film"), TINY_VOCAB.index("good")])
    path = write_student(teacher, RunDir(run).tokenizer_dir, [1], tmp_path / "student", kept)
    checkpoint = read_checkpoint(path)
    student = build_encoder(checkpoint)
    rows = student.named_variables()["embeddings/word_embeddings"].numpy()
    whole = teacher.named_variables()["embeddings/word_embeddings"].numpy()
    np.testing.assert_array_equal(rows, whole[kept])
    tokenizer = build_tokenizer(checkpoint)  # the student's ids index those rows
    assert tokenizer.vocab_size == 7
    assert tokenizer.tokenize("good film bad").numpy().tolist() == [6, 5, 1]  # bad: [UNK]


def test_a_narrowed_feed_forward_keeps_the_neurons_of_largest_weights_and_drops_the_idle():
    from bertfit.distill.student import narrow_feed_forward

    rng = np.random.default_rng(0)
    into, out = "encoder.layer.0.intermediate.dense", "encoder.layer.0.output.dense.weight"
    weight_in, weight_out = rng.normal(size=(6, 4)), rng.normal(size=(4, 6))
    weight_in[1] *= 10  # neuron 1 reaches far; neurons 4 and 5 add nothing to the output
    weight_out[:, 4] = weight_out[:, 5] = 0.0
    tensors = {f"{into}.weight": weight_in, f"{into}.bias": np.arange(6.0), out: weight_out}
    narrowed = narrow_feed_forward(tensors, layers=1, size=4)
    reach = np.linalg.norm(weight_in, axis=1) * np.linalg.norm(weight_out, axis=0)
    kept = sorted(np.argsort(-reach)[:4])
    assert 1 in kept and 4 not in kept and 5 not in kept
    np.testing.assert_array_equal(narrowed[f"{into}.weight"], weight_in[kept])
    np.testing.assert_array_equal(narrowed[f"{into}.bias"], np.array(kept, float))
    np.testing.assert_array_equal(narrowed[out], weight_out[:, kept])
    # dropping neurons that add nothing leaves the feed-forward's output as it was
    hidden = rng.normal(size=(3, 4))

    def feed_forward(t):
        return np.maximum(hidden @ t[f"{into}.weight"].T + t[f"{into}.bias"], 0) @ t[out].T

    np.testing.assert_allclose(feed_forward(narrowed), feed_forward(tensors), atol=1e-12)


def test_augmented_copies_keep_some_of_each_texts_words_in_their_order_without_labels():
    from bertfit.data.sources import Example
    from bertfit.distill.augment import augmented

    rows = [Example("the film was very good indeed", "a pair here", "pos", 2)]
    rows.append(Example("dull", None, "neg", 3))
    copies = augmented(rows, copies=3, seed=0)
    assert len(copies) == 6 and [c.text for c in copies[3:]] == ["dull"] * 3  # a word is kept
    assert all(c.label is None for c in copies) and [c.line for c in copies] == [2] * 3 + [3] * 3
    for copy in copies[:3]:
        for kept, whole in ((copy.text, rows[0].text), (copy.text_pair, rows[0].text_pair)):
            words = kept.split()
            assert words and [w for w in whole.split() if w in words] == words
    assert any(len(c.text.split()) < 6 for c in augmented(rows[:1], copies=20, seed=0))
    assert copies[3].text_pair is None
    assert augmented(rows, 3, seed=0) == copies and augmented(rows, 3, seed=1) != copies


@pytest.mark.slow
def test_augmented_copies_are_labelled_by_the_teacher_alone(pruned_student):
    from bertfit.distill.soft_labels import SoftLabels

    soft = SoftLabels.load(pruned_student / "distill" / "soft_labels.npz")
    assert len(soft.given) == 64 and (soft.given[32:] == -1).all() and (soft.given[:32] >= 0).all()
    rows = (pruned_student / "distill" / "train.jsonl").read_text().splitlines()
    assert len(rows) == 64  # the student's training file: the rows, then the copies
    settings = json.loads((pruned_student / "distill" / "settings.json").read_text())
    assert settings["augment"] == 1


def test_a_student_of_a_pruned_teacher_keeps_ids_of_the_whole_vocabulary(tmp_path):
    from bertfit.distill.student import write_student
    from bertfit.text.vocab_map import read_vocab_map, write_vocab_map
    from tests.tiny import TINY_CONFIG, TINY_VOCAB, tiny_encoder, write_vocab

    teacher_dir = tmp_path / "teacher"  # a pruned teacher: 8 rows for ids 0-4, 8, 10, 12
    teacher_dir.mkdir()
    write_vocab(teacher_dir)
    (teacher_dir / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    write_vocab_map(teacher_dir, np.array([0, 1, 2, 3, 4, 8, 10, 12]))
    teacher = tiny_encoder(dataclasses.replace(TINY_CONFIG, vocab_size=8))
    kept = np.array([0, 1, 2, 3, 4, 6])  # of the teacher's ids: its 6 is the whole vocab's 10
    path = write_student(teacher, teacher_dir, [1], tmp_path / "student", kept)
    assert read_vocab_map(path, len(TINY_VOCAB)).tolist() == [0, 1, 2, 3, 4, 10]
    assert json.loads((path / "config.json").read_text())["vocab_size"] == 6
    # and a student of it with every row of the teacher keeps the teacher's map
    path = write_student(teacher, teacher_dir, [1], tmp_path / "whole")
    assert read_vocab_map(path, len(TINY_VOCAB)).tolist() == [0, 1, 2, 3, 4, 8, 10, 12]


def _errors(capsys, argv) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err.strip()


def test_distill_mistakes_exit_2_with_one_clear_line(trained_run, tmp_path, capsys):
    from bertfit.training.run_dir import TrainingRunDir as RunDir

    run = trained_run[1].run_dir
    out = str(tmp_path / "student")
    cases = {
        "a teacher that is not there": (
            ["--teacher", str(tmp_path / "none"), "--output-dir", out],
            "holds no run",
        ),
        "a folder that is not a run": (
            ["--teacher", str(tmp_path), "--output-dir", out],
            "is not a bertfit run directory",
        ),
        "as many layers as the teacher": (
            ["--teacher", run, "--output-dir", out, "--student-layers", "2"],
            "the teacher has 2 layers; a student keeps 1 to 1",
        ),
        "--model instead of a student": (
            ["--teacher", run, "--output-dir", out, "--model", "minilm-l6"],
            "--student-model CHECKPOINT",
        ),
        "no output directory": (["--teacher", run], "--output-dir STUDENT is required"),
        "the teacher as the student": (
            ["--teacher", run, "--output-dir", run, "--overwrite"],
            "is the teacher's run (--teacher)",
        ),
        "a pruned vocabulary of a student's own checkpoint": (
            ["--teacher", run, "--output-dir", out, "--student-model", run, "--prune-vocab"],
            "--prune-vocab prunes a student cut from the teacher",
        ),
        "a feed-forward as wide as the teacher's": (
            ["--teacher", run, "--output-dir", out, "--student-intermediate-size", "64"],
            "the teacher's feed-forwards have 64 neurons; a student keeps fewer (1 to 63)",
        ),
        "a soft weight above 1": (
            ["--teacher", run, "--output-dir", out, "--soft-weight", "2"],
            "--soft-weight must be between 0 and 1",
        ),
    }
    (tmp_path / "stray.txt").write_text("not a run")
    tagged = tmp_path / "tagged"  # the same run, as if it were multi-label
    shutil.copytree(run, tagged, ignore=shutil.ignore_patterns(".lock"))
    task = RunDir(tagged).load_task()
    RunDir(tagged).save_task(dataclasses.replace(task, kind="multi-label"))
    labels = json.loads((tagged / "labels.json").read_text())
    labels.pop("temperatures", None)  # a single-label run's calibration does not fit multi-label
    (tagged / "labels.json").write_text(json.dumps(labels))
    cases["a multi-label teacher"] = (
        ["--teacher", str(tagged), "--output-dir", out],
        "is a multi-label run; bertfit distill distils single-label",
    )
    other = tmp_path / "other"  # the same run, as if its encoder were another architecture's
    shutil.copytree(run, other, ignore=shutil.ignore_patterns(".lock"))
    encoder_config = RunDir(other).encoder_dir / "config.json"
    encoder_config.write_text(
        json.dumps(json.loads(encoder_config.read_text()) | {"model_type": "deberta-v2"})
    )
    cases["a pruned student of a teacher that is not BERT"] = (  # refused before it labels
        ["--teacher", str(other), "--output-dir", out, "--prune-vocab"],
        "--student-layers cuts BERT-architecture teachers only; this teacher is a deberta-v2",
    )
    for case, (argv, words) in cases.items():
        code, err = _errors(capsys, ["distill", *argv])
        assert code == 2, case
        assert err.startswith("bertfit distill: error:") and words in err, (case, err)
        assert len(err.splitlines()) == 1, case
    assert not (tmp_path / "student").exists()  # nothing written by a refused command


@pytest.mark.slow
def test_a_distilled_student_trains_exports_and_reuses_the_teachers_labels(
    trained_run, tmp_path, capsys, monkeypatch
):
    from bertfit.distill.soft_labels import SoftLabels
    from bertfit.export.serving import export_classifier
    from bertfit.inference.predictor import Classifier
    from bertfit.inference.run import evaluate
    from tests.tiny import sentiment_rows, write_csv

    config, summary = trained_run
    unlabelled = write_csv(tmp_path / "more.csv", sentiment_rows(24, seed=5))
    out = tmp_path / "student"
    argv = ["distill", "--teacher", summary.run_dir, "--output-dir", str(out)]
    argv += ["--student-layers", "1", "--unlabelled", str(unlabelled), "--epochs", "1"]
    argv += ["--temperature", "3", "--quiet", "--no-report", "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["run_dir"] == str(out)

    soft = SoftLabels.load(out / "distill" / "soft_labels.npz")
    assert soft.probabilities.shape == (192 + 24, 2)
    assert (soft.given[:192] >= 0).all() and (soft.given[192:] == -1).all()
    teacher = Classifier.from_run(summary.run_dir)
    rows = [json.loads(line) for line in (out / "distill" / "train.jsonl").open()]
    np.testing.assert_allclose(
        soft.probabilities[:4], teacher.predict_proba([r["text"] for r in rows[:4]]), atol=1e-5
    )
    student = Classifier.from_run(out)
    assert student.module.model.encoder.config.num_hidden_layers == 1
    metrics = evaluate(out, config.data.eval, quiet=True)
    assert metrics["num_examples"] == 37 and 0.0 <= metrics["accuracy"] <= 1.0
    export_classifier(student, tmp_path / "export")
    exported = Classifier.from_export(tmp_path / "export")
    texts = ["good film", "bad film"]
    np.testing.assert_allclose(
        exported.predict_proba(texts), student.predict_proba(texts), atol=1e-5
    )

    # A distillation killed after the teacher labelled the rows reuses its labels (the teacher
    # is not asked again); other settings over them are refused.
    again = tmp_path / "again"
    shutil.copytree(out / "distill", again / "distill")
    changed = [*argv[:3], "--output-dir", str(again), *argv[5:]]
    code, err = _errors(capsys, [*changed, "--temperature", "1"])  # the last flag counts
    assert code == 2 and "holds a distillation of another teacher, other rows" in err

    def asked(*_args, **_kwargs):
        raise AssertionError("the teacher was asked again")

    monkeypatch.setattr(Classifier, "predict_proba", asked)
    assert main(changed) == 0
    assert Classifier.from_run(again).module.model.encoder.config.num_hidden_layers == 1
    code, err = _errors(capsys, [*argv, "--resume"])
    assert code == 2 and "holds a finished run" in err

    # `bertfit train` over a student would train it without the teacher's labels: refused.
    shutil.rmtree(again / "checkpoints")
    (again / "metrics.json").write_text('{"status": "running"}')
    code, err = _errors(capsys, ["train", "--config", str(again / "config.yaml"), "--resume"])
    assert code == 2 and "is a `bertfit distill` student" in err


@pytest.mark.slow
def test_a_pruned_narrowed_student_exports_a_smaller_saved_model_equal_to_its_own_predict(
    trained_run, pruned_student, tmp_path
):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a TF Serving client loads them)

    from bertfit.export.serving import export_classifier
    from bertfit.inference.predictor import Classifier

    whole = tmp_path / "student"  # pruned_student's settings, without pruning or narrowing
    argv = ["distill", "--teacher", trained_run[1].run_dir, "--output-dir", str(whole)]
    argv += ["--student-layers", "1", "--epochs", "1", "--max-train-examples", "32", "--quiet"]
    assert main([*argv, "--no-report"]) == 0
    student = Classifier.from_run(pruned_student)
    exported = export_classifier(student, tmp_path / "export")
    whole_export = export_classifier(Classifier.from_run(whole), tmp_path / "whole-export")
    texts = ["good film", "an awful , boring plot", "the movie was fun ! ?"]  # ?: not kept
    tokenizer = student.module.tokenizer  # the rows hold no "?": it reads as the unknown token
    assert tokenizer.vocab_size < 41 and tokenizer.tokenize("?").numpy() == [tokenizer.unk_id]
    assert student.module.model.encoder.config.intermediate_size == 16
    serving = tf.saved_model.load(str(exported)).signatures["serving_default"]
    np.testing.assert_allclose(
        serving(text=tf.constant(texts))["probabilities"].numpy(),
        student.predict_proba(texts),
        rtol=0,
        atol=1e-5,
    )
    assert _weights_size(exported) < _weights_size(whole_export)


def _weights_size(saved_model) -> int:
    """The bytes of a SavedModel's variables (its graph's size is the tokenizer's)."""
    return sum(f.stat().st_size for f in (saved_model / "variables").iterdir())


def test_a_packed_batch_is_distilled_slot_by_slot():
    """With --packing the targets and weights are [rows, slots, ...]: the loss of the
    example slots, in the order of the logits' rows, as if unpacked."""
    import tensorflow as tf

    from bertfit.distill.loss import UNLABELLED, batch_loss, distillation_targets

    teacher = np.array([[0.7, 0.3], [0.1, 0.9], [0.5, 0.5], [0.6, 0.4]])
    targets = distillation_targets(teacher, np.array([0, 1, UNLABELLED, 0]), 2.0)
    logits = tf.constant([[1.0, 0.5], [0.2, -0.3], [0.9, 0.1], [0.0, 0.0]])
    weights = np.array([1.0, 1.0, 0.5, 0.0], np.float32)  # the last slot is empty
    flat = {"label": targets, "example_weight": weights, "global_examples": 3.0}
    packed = {**flat, "label": targets.reshape(2, 2, -1), "example_weight": weights.reshape(2, 2)}
    expected = batch_loss(flat, logits, 2.0, 0.5).numpy()
    assert batch_loss(packed, logits, 2.0, 0.5).numpy() == pytest.approx(expected)


@pytest.mark.slow
def test_a_student_collapsed_onto_one_class_is_warned_as_a_trained_run_is(
    trained_run, trainable_hf_dir, tmp_path, capsys
):
    # The student's training labels are the teacher's soft targets; the collapse warning
    # counts the rows' classes (it crashed on the soft targets: "object too deep").
    run = trained_run[1].run_dir
    out = tmp_path / "student"
    argv = ["distill", "--teacher", run, "--student-model", str(trainable_hf_dir)]
    argv += ["--output-dir", str(out), "--epochs", "1", "--learning-rate", "1e-3"]
    argv += ["--calibrate", "off", "--max-seq-length", "16", "--quiet", "--no-report"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "bertfit: warning: the model predicts only 1 of the 2 classes" in err
    assert "The training labels are near-balanced" in err  # counted from the student's rows
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["epochs"][0]["eval"]["warnings"]


@pytest.mark.slow
def test_a_refused_distillation_writes_nothing_and_keeps_the_run_it_would_replace(
    trained_run, tmp_path, capsys
):
    run = trained_run[1].run_dir
    out = tmp_path / "students" / "first"
    argv = ["distill", "--teacher", run, "--output-dir", str(out), "--max-seq-length", "16"]
    # the student's own flags are refused before the teacher labels a row
    code, err = _errors(capsys, [*argv, "--student-model", str(tmp_path / "nothere")])
    assert code == 2 and "nothere: no such file or directory" in err, err
    assert len(err.splitlines()) == 1, err
    # refused once the teacher labelled the rows (a missing --eval): its labels go too, so the
    # command with other settings is not refused for them
    for temperature in ("2", "3"):
        missing_eval = ["--eval", str(tmp_path / "none.csv"), "--temperature", temperature]
        code, err = _errors(capsys, [*argv, "--student-layers", "1", *missing_eval])
        assert code == 2 and "none.csv: file not found" in err, err
        assert not (tmp_path / "students").exists()

    # --overwrite over a finished run clears it only once the new student starts
    shutil.copytree(run, out, ignore=shutil.ignore_patterns(".lock"))
    before = sorted(p.name for p in out.iterdir())
    code, err = _errors(capsys, [*argv, "--student-layers", "1", *missing_eval, "--overwrite"])
    assert code == 2 and "none.csv: file not found" in err
    assert sorted(p.name for p in out.iterdir()) == before
    assert json.loads((out / "metrics.json").read_text())["status"] == "finished"
