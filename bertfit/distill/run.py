"""`bertfit distill`: the teacher's probabilities of the training rows (and of any unlabelled
texts), then an ordinary training run of the student on them with the distillation loss
(`bertfit.distill.loss`), both on the student's Keras backend (`bertfit.distill.teacher`). The
student's run directory is a run like any: evaluate, predict, export, serve and report read it;
`bertfit distill --resume` continues it.

Examples:
    teacher = "runs/minilm"                      # a finished `bertfit train`
    teacher_config = open_teacher(teacher).load_config()  # `bertfit.distill.config`
    config = student_config(teacher_config, "runs/student", {})
    summary = distill(config, DistillConfig(teacher=teacher, student_layers="3"))
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from pathlib import Path

import numpy as np

from bertfit.atomic import temporary_path, write_text_atomic
from bertfit.checkpoints.load import detect_checkpoint
from bertfit.checkpoints.registry import resolve
from bertfit.config import RunConfig
from bertfit.data.run_files import read_training_examples
from bertfit.data.sources import Example, read_examples
from bertfit.data.tasks import SINGLE_LABEL
from bertfit.data.training_data import LabelledData
from bertfit.distill import loss
from bertfit.distill.augment import augmented
from bertfit.distill.config import (
    DistillConfig,
    check_intermediate_size,
    chosen_layers,
    open_teacher,
)
from bertfit.distill.soft_labels import (
    DISTILL_DIR,
    SOFT_LABELS_FILE,
    STUDENT_DIR,
    SoftLabels,
    distill_fingerprint,
    rows_file,
    write_rows,
)
from bertfit.distill.student import StudentCut, check_cuttable, write_student
from bertfit.distill.teacher import Teacher, load_teacher
from bertfit.errors import BertfitError, ConfigError, DataError
from bertfit.inference.run import classifier_source_spec
from bertfit.inference.texts import TextClassifier
from bertfit.progress import Console
from bertfit.runs.records import RunSummary
from bertfit.runs.run_dir import RunDir
from bertfit.text.vocab_map import kept_ids
from bertfit.training.backends import backend_of
from bertfit.training.run import train
from bertfit.training.run_dir import TrainingRunDir
from bertfit.training.setup import RunSetup

SETTINGS_FILE = "settings.json"


def distill(
    config: RunConfig,
    options: DistillConfig,
    *,
    quiet: bool = False,
    resume: bool | None = None,
    overwrite: bool = False,
) -> RunSummary:
    """Labels the student's rows with the teacher (or reuses the labels in
    `output_dir/distill/` when the teacher and the rows are the same), then trains the
    student from them; returns the student's run summary.

    A command refused before the student's first step leaves nothing behind: the labels it
    wrote are removed (the corrected command labels again); with `overwrite` the previous
    run's checkpoints and results are cleared only once the student's run starts."""
    options.validate()
    teacher_dir = open_teacher(options.teacher)
    out = Path(config.output_dir)
    if out.resolve() == teacher_dir.path.resolve():
        raise ConfigError(
            f"--output-dir {out} is the teacher's run (--teacher); the student is a run of its "
            "own: choose another --output-dir."
        )
    folder = out / DISTILL_DIR
    student = _student_run(config, options, folder)
    TrainingRunDir(out).plan_start(student, resume=resume, overwrite=overwrite)
    backend = backend_of(student)  # the teacher labels on it too
    backend.check(student, distilling=True)  # before the teacher labels anything
    layers = None
    if options.student_model is None:
        teacher_config = teacher_dir.load_bert_config()
        check_cuttable(teacher_config)  # before the teacher labels anything
        layers = chosen_layers(options.student_layers, teacher_config.num_hidden_layers)
        check_intermediate_size(options.student_intermediate_size, teacher_config.intermediate_size)
    else:
        detect_checkpoint(resolve(options.student_model))
    console = Console(quiet=quiet)
    teacher = load_teacher(teacher_dir.path, backend.name)
    made = [p for p in [out.absolute(), *out.absolute().parents] if not p.exists()]
    wrote, started = False, False  # refused before `started`: what this command `wrote` goes

    def adapt(setup: RunSetup) -> None:
        nonlocal started
        _use_teacher(setup, soft, options)
        started = True  # the student's run directory is written next

    try:
        soft, wrote = _distillation_set(
            config, options, teacher, teacher_dir, layers, folder, console, relabel=overwrite
        )
        return train(student, quiet=quiet, resume=resume, overwrite=overwrite, adapt=adapt)
    except BertfitError:
        if wrote and not started:
            _remove_set(folder, made)
        raise


def _remove_set(folder: Path, made: list[Path]) -> None:
    """Removes the distillation set `folder` and the folders `made` for it (deepest first)
    while nothing else is in them."""
    shutil.rmtree(folder, ignore_errors=True)
    for made_folder in made:
        if any(made_folder.iterdir()):
            return
        made_folder.rmdir()


def _student_run(config: RunConfig, options: DistillConfig, folder: Path) -> RunConfig:
    """The student's `RunConfig`: the distillation set's rows as its training file, the
    student's checkpoint as its model."""
    model = options.student_model or str(folder / STUDENT_DIR)
    data = dataclasses.replace(
        config.data,
        train=str(rows_file(folder, config.data.format)),
        max_train_examples=None,
        streaming=False,
    )
    student = dataclasses.replace(
        config, model=dataclasses.replace(config.model, name=model, task=SINGLE_LABEL), data=data
    )
    return student.validate()


def _settings(options: DistillConfig, teacher_dir: RunDir, layers: list[int] | None) -> dict:
    return {
        "teacher": str(teacher_dir.path.resolve()),
        "student_layers": layers,
        "student_model": options.student_model,
        "unlabelled": options.unlabelled,
        "temperature": options.temperature,
        "soft_weight": options.soft_weight,
        # absent when off, so an earlier distillation's settings still match
        **({"prune_vocab": True} if options.prune_vocab else {}),
        **(
            {"student_intermediate_size": options.student_intermediate_size}
            if options.student_intermediate_size is not None
            else {}
        ),
        **({"augment": options.augment} if options.augment else {}),
    }


def _distillation_set(
    config: RunConfig,
    options: DistillConfig,
    teacher: Teacher,
    teacher_dir: RunDir,
    layers: list[int] | None,
    folder: Path,
    console: Console,
    *,
    relabel: bool = False,
) -> tuple[SoftLabels, bool]:
    """The teacher's labels of the rows, reused from `folder` when it holds them for this
    teacher, these rows and these settings (unless `relabel`); else predicted and written
    (whole or not at all) over any there. Also whether they were written."""
    rows, given = _rows(config, options, teacher.classifier)
    checkpoint = teacher_dir.checkpoint_path("best")
    fingerprint = distill_fingerprint(checkpoint, rows)
    settings = _settings(options, teacher_dir, layers)
    if (folder / SOFT_LABELS_FILE).exists() and not relabel:
        saved = SoftLabels.load(folder / SOFT_LABELS_FILE)
        kept = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        if saved.fingerprint == fingerprint and kept == settings:
            console.say(f"bertfit: reusing the teacher's labels of {len(rows)} rows in {folder}")
            return saved, False
        raise ConfigError(
            f"{folder} holds a distillation of another teacher, other rows or other settings "
            "(--student-layers, --temperature, --soft-weight, --unlabelled, --prune-vocab, "
            "--student-intermediate-size, --augment); pass "
            "--overwrite to start the student again, or a new --output-dir."
        )
    console.say(f"bertfit: the teacher labels {len(rows)} rows")
    classifier = teacher.classifier
    probabilities = classifier.predict_proba(
        [r.text for r in rows], [r.text_pair for r in rows] if classifier.pairs else None
    )
    soft = SoftLabels(probabilities, given, list(classifier.labels), fingerprint)
    rows_name = rows_file(folder, config.data.format).name
    kept = student_vocabulary(teacher.tokenizer, rows) if options.prune_vocab else None
    cut = StudentCut(layers, kept, options.student_intermediate_size)
    _write_set(folder, rows_name, soft, rows, teacher, cut, settings, teacher_dir)
    return soft, True


def student_vocabulary(tokenizer, rows: list[Example]) -> np.ndarray:
    """The ids of the teacher's tokenizer (in the graph, or on the host: the same ids) that
    the rows' texts (and pairs) use, and its special tokens': the pruned student's vocabulary
    (`bertfit.text.vocab_map`)."""
    texts = [r.text for r in rows] + [r.text_pair for r in rows if r.text_pair is not None]
    return kept_ids(tokenizer.tokenize_all(texts).values, tokenizer.special_token_ids)


def _rows(
    config: RunConfig, options: DistillConfig, teacher: TextClassifier
) -> tuple[list[Example], np.ndarray]:
    """The labelled training rows (up to --max-train-examples), then the unlabelled ones and
    the --augment copies; and each row's given class index in the teacher's classes (-1:
    none)."""
    labelled = read_training_examples(config.data.train, config)[: config.data.max_train_examples]
    index = {label: i for i, label in enumerate(teacher.labels)}
    for row in labelled:
        if row.label not in index:
            raise DataError(
                f"{config.data.train}, line {row.line}: label {row.label!r} is not one of the "
                f"teacher's classes ({', '.join(teacher.labels)}); the student learns the "
                "teacher's classes only."
            )
    unlabelled = []
    if options.unlabelled:
        spec = classifier_source_spec(teacher, config.data.format)
        unlabelled = read_examples(options.unlabelled, spec, labels_required=False)
        if not unlabelled:
            raise DataError(f"--unlabelled {options.unlabelled} holds no rows.")
    unlabelled += augmented(labelled, options.augment, config.train.seed)
    given = [index[row.label] for row in labelled] + [loss.UNLABELLED] * len(unlabelled)
    return [*labelled, *unlabelled], np.asarray(given, np.int32)


def _write_set(
    folder: Path,
    rows_name: str,
    soft: SoftLabels,
    rows: list[Example],
    teacher: Teacher,
    cut: StudentCut,
    settings: dict,
    teacher_dir: RunDir,
) -> None:
    """`folder` written beside itself and renamed into place (over the one there), with the
    student's checkpoint `cut` from the teacher (none with --student-model)."""
    building = temporary_path(folder)
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    chosen = soft.probabilities.argmax(axis=1)
    names = [
        teacher.classifier.labels[g if g != loss.UNLABELLED else c]
        for g, c in zip(soft.given, chosen, strict=True)
    ]
    write_rows(building / rows_name, rows, names, _columns(teacher.classifier))
    soft.save(building / SOFT_LABELS_FILE)
    if cut.layers is not None:
        write_student(
            teacher.encoder,
            teacher_dir.tokenizer_dir,
            cut.layers,
            building / STUDENT_DIR,
            cut.kept_ids,
            cut.intermediate_size,
        )
    write_text_atomic(building / SETTINGS_FILE, json.dumps(settings, indent=2))
    shutil.rmtree(folder, ignore_errors=True)
    building.rename(folder)


def _columns(teacher: TextClassifier) -> dict:
    spec = classifier_source_spec(teacher)
    return {
        "text": spec.text_column,
        "text_pair": spec.text_pair_column,
        "label": spec.label_column,
    }


def _use_teacher(setup: RunSetup, soft: SoftLabels, options: DistillConfig) -> None:
    """The student's targets become the teacher's softened probabilities and the given labels
    (in the student's class order), and its loss the distillation loss."""
    train = setup.train
    if not isinstance(train, LabelledData) or len(train) != len(soft.given):
        raise BertfitError(
            f"the student read {len(train)} rows of {setup.config.data.train}, the teacher "
            f"labelled {len(soft.given)}; pass --overwrite to label them again."
        )
    if sorted(setup.task.labels) != sorted(soft.labels):
        raise BertfitError(
            f"the student's classes {list(setup.task.labels)} are not the teacher's "
            f"{soft.labels}; pass --overwrite to label the rows again."
        )
    order = np.array([soft.labels.index(label) for label in setup.task.labels])
    to_student = np.argsort(order)  # teacher class index → student class index
    given = np.where(soft.given == loss.UNLABELLED, loss.UNLABELLED, to_student[soft.given])
    train.labels = loss.distillation_targets(
        soft.probabilities[:, order], given, options.temperature
    )
    setup.trainer.batch_loss = functools.partial(
        loss.batch_loss, temperature=options.temperature, soft_weight=options.soft_weight
    )
