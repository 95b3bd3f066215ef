"""The batch size and epochs of a run that leaves them out (no `--batch-size`, no `--epochs`):
the defaults, a batch of 32 for 3 epochs, where the training set is large enough for them, and
a schedule that learns where it is not (issue 63).

At the defaults 16 rows train 3 optimizer steps, and a fine-tuned encoder has learned next to
nothing. The rule, in rows of the training set:
- batch size: an eighth of the rows (with `--few-shot` a quarter: its first stage trains every
  pair of a batch's rows, and the larger batches measured better from 32 rows a class), at
  least 8 and at most 32 (rounded up to a multiple of the replicas, which split it);
- epochs: 3, or as many as make at least `MIN_STEPS` optimizer steps, at most `MAX_EPOCHS`;
  with `--few-shot` at most `FEW_SHOT_MAX_EPOCHS`: its second stage trains the head alone, from
  the fit its first stage ends with (measured: docs/training.md#few-shot-training).

Sets of about 1,100 rows or more keep the defaults; a flag given always wins (`--epochs` alone
keeps the rule's batch, `--batch-size` alone the rule's epochs for that batch), and with
`--max-steps` the epochs are not used. `training.setup.assemble` decides it once, says it in the
run's first lines, and saves the values in the run's config.yaml, which a resumed run keeps.
The numbers are measured: docs/training.md#small-training-sets.

>>> small_set_schedule(16)
Schedule(batch_size=8, epochs=30)
>>> small_set_schedule(400)
Schedule(batch_size=32, epochs=8)
>>> small_set_schedule(10_000)
Schedule(batch_size=32, epochs=3)
"""

from __future__ import annotations

import dataclasses

from bertfit.config import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, RunConfig

MIN_BATCH_SIZE = 8
BATCHES_PER_EPOCH = 8  # a small set's batch is about this share of it
FEW_SHOT_BATCHES_PER_EPOCH = 4  # stage 1 trains every pair in a batch: more rows, more pairs
MIN_STEPS = 100  # optimizer steps a run trains at least, unless MAX_EPOCHS stops it first
MAX_EPOCHS = 30  # every epoch saves a checkpoint (and evaluates with --eval)
FEW_SHOT_MAX_EPOCHS = 1


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A run's global batch size and its epochs."""

    batch_size: int
    epochs: int


def small_set_schedule(
    rows: int,
    *,
    replicas: int = 1,
    grad_accum: int = 1,
    batch_size: int | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    few_shot: bool = False,
) -> Schedule:
    """The schedule of a run on `rows` training rows: `batch_size` and `epochs` where given,
    else the rule's (the module's docstring). `replicas` split each batch; `grad_accum`
    micro-batches make one optimizer step; with `max_steps` the epochs are not used (the
    default is kept); `few_shot`: the run's classifier stage follows `--few-shot`'s first.

    >>> small_set_schedule(64, few_shot=True)
    Schedule(batch_size=16, epochs=1)
    """
    if batch_size is None:
        share = FEW_SHOT_BATCHES_PER_EPOCH if few_shot else BATCHES_PER_EPOCH
        batch_size = min(DEFAULT_BATCH_SIZE, max(MIN_BATCH_SIZE, rows // share))
        batch_size = -(-batch_size // replicas) * replicas
    if epochs is None:
        epochs = DEFAULT_EPOCHS
        steps_per_epoch = _steps(rows, batch_size * grad_accum, 1)
        if max_steps is None and steps_per_epoch * epochs < MIN_STEPS:
            epochs = min(MAX_EPOCHS, -(-MIN_STEPS // steps_per_epoch))
        if few_shot:
            epochs = min(epochs, FEW_SHOT_MAX_EPOCHS)
    return Schedule(batch_size, epochs)


def decide_schedule(config: RunConfig, rows: int, replicas: int) -> tuple[RunConfig, str | None]:
    """`config` with its batch size and epochs decided for `rows` training rows split over
    `replicas` (`small_set_schedule`), and a note for the user when they are not the
    defaults; a config that sets both comes back as it is."""
    t = config.train
    if t.batch_size is not None and t.epochs is not None:
        return config, None
    schedule = small_set_schedule(
        rows,
        replicas=replicas,
        grad_accum=t.grad_accum,
        batch_size=t.batch_size,
        epochs=t.epochs,
        max_steps=t.max_steps,
        few_shot=t.few_shot,
    )
    decided = dataclasses.replace(
        config,
        train=dataclasses.replace(t, batch_size=schedule.batch_size, epochs=schedule.epochs),
    )
    chosen = {}  # flag: what the rule chose in its place
    if t.batch_size is None and schedule.batch_size != DEFAULT_BATCH_SIZE:
        chosen["--batch-size"] = f"batch size {schedule.batch_size}"
    if t.epochs is None and schedule.epochs != DEFAULT_EPOCHS:
        chosen["--epochs"] = f"{schedule.epochs} epoch{'s' if schedule.epochs > 1 else ''}"
    if not chosen:
        return decided, None
    if t.max_steps is None:
        batch = t.batch_size or DEFAULT_BATCH_SIZE
        steps = _steps(rows, schedule.batch_size * t.grad_accum, schedule.epochs)
        default = _steps(rows, batch * t.grad_accum, DEFAULT_EPOCHS)
        length = (
            f"{steps} optimizer steps or more, where {DEFAULT_EPOCHS} epochs at batch {batch} "
            f"would be {default}"
        )
    else:
        length = f"--max-steps {t.max_steps}"
    stage = " (the head alone, after --few-shot's first stage)" if t.few_shot else ""
    return decided, (
        f"schedule: {' and '.join(chosen.values())} for {rows} training rows{stage} ({length}); "
        f"{' and '.join(chosen)} {'override' if len(chosen) > 1 else 'overrides'} it"
    )


def _steps(rows: int, batch: int, epochs: int) -> int:
    """Optimizer steps of `epochs` epochs of `rows` rows, `batch` rows a step (length buckets
    may add a partial batch each)."""
    return -(-rows // batch) * epochs
