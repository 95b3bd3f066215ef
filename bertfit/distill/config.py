"""`bertfit distill`'s own settings; the student's training settings are an ordinary
`RunConfig` (the teacher's, with the flags given on top: `student_config`). Nothing here
imports Keras: the CLI reads them before it chooses Keras' backend (the student's)."""

from __future__ import annotations

import dataclasses

from bertfit.config import SINGLE_LABEL, RunConfig, override
from bertfit.errors import ConfigError
from bertfit.flags import flag
from bertfit.runs.records import FINISHED
from bertfit.runs.run_dir import RunDir


@dataclasses.dataclass
class DistillConfig:
    """What the student learns from and starts from.

    Args:
        teacher: the finished run directory of the fine-tuned teacher.
        student_layers: how many of the teacher's layers the student keeps ("3": evenly
            spaced, the first always kept), or which ("0,2,4"); the student starts from the
            teacher's embeddings and those layers (BERT-architecture teachers).
        student_model: any checkpoint `--model` takes, instead of the teacher's layers.
        unlabelled: a file of texts without labels (the training files' text columns) that the
            teacher labels too; the student learns them from the teacher alone.
        temperature: T, softening both the teacher's and the student's probabilities.
        soft_weight: the share of the teacher's soft labels in a labelled row's loss (the rest
            is the given label's cross-entropy).
        prune_vocab: the student's word embeddings keep only the tokens the rows use and the
            special tokens (with --student-layers); any other token reads as the unknown one.
        student_intermediate_size: each kept layer's feed-forward keeps this many of its
            neurons, those of largest weights (with --student-layers): a smaller, faster student.
        augment: copies of each labelled text with words dropped (`bertfit.distill.augment`)
            that the teacher labels, as it does `unlabelled` texts.
    """

    teacher: str | None = dataclasses.field(
        default=None, metadata=flag("the teacher: a finished run directory", metavar="RUN")
    )
    student_layers: str | None = dataclasses.field(
        default=None,
        metadata=flag(
            "the student keeps N of the teacher's layers, evenly spaced (e.g. 3), or the ones "
            "listed (e.g. 0,2,4), starting from the teacher's weights (default: half)",
            metavar="N|LIST",
        ),
    )
    student_model: str | None = dataclasses.field(
        default=None,
        metadata=flag(
            "start the student from this checkpoint (any --model) instead of teacher layers",
            metavar="CHECKPOINT",
        ),
    )
    unlabelled: str | None = dataclasses.field(
        default=None,
        metadata=flag("more texts, without labels, for the teacher to label", metavar="FILE"),
    )
    temperature: float = dataclasses.field(
        default=2.0, metadata=flag("softens the teacher's and the student's probabilities")
    )
    soft_weight: float = dataclasses.field(
        default=0.5,
        metadata=flag("the soft labels' share of a labelled row's loss, 0 to 1"),
    )

    prune_vocab: bool = dataclasses.field(
        default=False,
        metadata=flag(
            "keep only the word embeddings of the tokens the student's rows use (and the "
            "special tokens): a smaller model; other tokens read as the unknown token",
            switch=True,
        ),
    )

    student_intermediate_size: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            "each kept layer's feed-forward keeps N of its neurons, those of largest weights "
            "(e.g. 384 of MiniLM's 1536): a smaller, faster student (default: all)",
            metavar="N",
        ),
    )

    augment: int = dataclasses.field(
        default=0,
        metadata=flag(
            "N copies of each labelled text with words dropped at random (each with "
            "probability 0.2), labelled by the teacher alone: more for the student to learn from",
            metavar="N",
        ),
    )

    def validate(self) -> DistillConfig:
        if not self.teacher:
            raise ConfigError("--teacher RUN is required: the run directory of the teacher.")
        if self.student_layers is not None and self.student_model is not None:
            raise ConfigError(
                "--student-layers and --student-model both choose the student's start; pass one."
            )
        if self.prune_vocab and self.student_model is not None:
            raise ConfigError(
                "--prune-vocab prunes a student cut from the teacher (--student-layers); a "
                "--student-model keeps its own vocabulary. Pass one of the two."
            )
        if self.student_intermediate_size is not None:
            if self.student_model is not None:
                raise ConfigError(
                    "--student-intermediate-size narrows a student cut from the teacher "
                    "(--student-layers); a --student-model keeps its own layers. Pass one of "
                    "the two."
                )
            if self.student_intermediate_size < 1:
                raise ConfigError(
                    "--student-intermediate-size must be at least 1, got "
                    f"{self.student_intermediate_size}."
                )
        if self.augment < 0:
            raise ConfigError(f"--augment must be 0 or more copies, got {self.augment}.")
        if not self.temperature > 0:
            raise ConfigError(f"--temperature must be above 0, got {self.temperature}.")
        if not 0.0 <= self.soft_weight <= 1.0:
            raise ConfigError(f"--soft-weight must be between 0 and 1, got {self.soft_weight}.")
        return self


def chosen_layers(choice: str | None, teacher_layers: int) -> list[int]:
    """The teacher's layers the student keeps: `choice` "N" (evenly spaced from layer 0, e.g.
    3 of 6 → 0, 2, 4), "i,j,k" (those, in increasing order), or None (half, rounded up)."""
    where = f"--student-layers {choice}"
    if choice is None:
        return chosen_layers(str(-(-teacher_layers // 2)), teacher_layers)
    parts = [p.strip() for p in choice.split(",")]
    if not all(p.isdigit() for p in parts):
        raise ConfigError(f"{where}: expected a count (3) or layer numbers (0,2,4).")
    numbers = [int(p) for p in parts]
    if len(numbers) == 1:
        count = numbers[0]
        if not 1 <= count < teacher_layers:
            raise ConfigError(
                f"{where}: the teacher has {teacher_layers} layers; a student keeps 1 to "
                f"{teacher_layers - 1} of them."
            )
        return [i * teacher_layers // count for i in range(count)]
    if numbers != sorted(set(numbers)) or numbers[-1] >= teacher_layers:
        raise ConfigError(
            f"{where}: layer numbers must increase, each below the teacher's "
            f"{teacher_layers} layers (0 to {teacher_layers - 1})."
        )
    if len(numbers) == teacher_layers:
        raise ConfigError(f"{where} keeps every layer of the teacher; name fewer.")
    return numbers


def check_intermediate_size(size: int | None, teacher_size: int) -> None:
    """Refuses a student feed-forward width (`size`) that is not below the teacher's."""
    if size is not None and size >= teacher_size:
        raise ConfigError(
            f"--student-intermediate-size {size}: the teacher's feed-forwards have "
            f"{teacher_size} neurons; a student keeps fewer (1 to {teacher_size - 1})."
        )


def open_teacher(path: str) -> RunDir:
    """The teacher's run directory: it must hold a finished single-label (or pair) run."""
    run_dir = RunDir(path)
    status = run_dir.status()
    if status != FINISHED:
        said = {"new": "holds no run", "foreign": "is not a bertfit run directory"}
        raise ConfigError(
            f"--teacher {path} {said.get(status, 'holds a run that did not finish')}; pass the "
            "--output-dir of a finished `bertfit train`."
        )
    kind = run_dir.load_task().kind
    if kind != SINGLE_LABEL:
        raise ConfigError(
            f"--teacher {path} is a {kind} run; bertfit distill distils single-label "
            "classifiers (one softmax over the classes, texts or text pairs) only."
        )
    return run_dir


def student_config(
    teacher: RunConfig,
    output_dir: str | None,
    flags: dict,
    student_model: str | None = None,
    chosen_schedule: bool = False,
) -> RunConfig:
    """The student's run: the teacher's settings with the flags given on top (e.g.
    `{"train.epochs": 2}`); `distill` then points its model and data at the distillation set.
    A student from its own checkpoint (`student_model`) pools as that checkpoint declares
    unless the flags give --pooling: the teacher's pooling was decided for the teacher's.
    `chosen_schedule`: the teacher's batch size and epochs were chosen for its small training
    set (`training.schedule`); the student's are chosen for the distillation set (with
    --unlabelled it may be far larger) unless the flags give them."""
    if not output_dir:
        raise ConfigError("--output-dir STUDENT is required: the student's run directory.")
    if "model.name" in flags:
        raise ConfigError(
            "--model: the student starts from the teacher's layers (--student-layers) or from "
            "--student-model CHECKPOINT; pass one of those instead."
        )
    config = dataclasses.replace(teacher, output_dir=output_dir)
    config.model = dataclasses.replace(teacher.model)
    config.data = dataclasses.replace(teacher.data)
    config.train = dataclasses.replace(teacher.train)
    if student_model is not None:
        config.model.pooling = None  # decided by the student's checkpoint when the run starts
    if chosen_schedule:
        config.train.batch_size = config.train.epochs = None  # decided for the student's rows
    override(config, flags)
    return config
