"""`check(...)`: every check on a run config (bertfit's own pipeline) or on a user's dataset."""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
import warnings
from typing import TYPE_CHECKING

import keras

from bertfit.checkpoints.detect import detect
from bertfit.checkpoints.formats import SIGNATURE_ONLY, TF1_SAVEDMODEL
from bertfit.checkpoints.load import read_detection
from bertfit.checkpoints.pooling import decide_pooling, declared_pooling
from bertfit.checkpoints.registry import resolve
from bertfit.checks.batches import (
    BatchExpectations,
    BatchStats,
    canonical,
    check_batch_size,
    check_spec,
    observe_batch,
    report_batches,
    split_element,
)
from bertfit.checks.data import (
    check_eval,
    check_jsonl_types,
    check_labels,
    check_lengths,
    data_error_finding,
    read_checked,
)
from bertfit.checks.findings import ERROR, TARGETS, WARNING, Report
from bertfit.checks.memory import BASE_BYTES, dtype_bytes, host_memory, report_fit
from bertfit.checks.model import (
    SIGNATURE_ONLY_WHY,
    check_gradients,
    compile_shapes,
    dataset_memory,
    memory_per_replica,
    no_encoder_variables,
    replica_step,
    signature_only_fix,
)
from bertfit.config import JAX_BACKEND, TENSORFLOW_BACKEND, RunConfig, check_positions
from bertfit.data.labelled import encode_labelled, window_spec
from bertfit.data.tasks import SINGLE_LABEL
from bertfit.data.tfrecord import Manifest, is_prepared, prepared_directory
from bertfit.errors import (
    BertfitError,
    CheckpointError,
    CheckpointWarning,
    ConfigError,
    DataError,
)
from bertfit.model.classifier import BertClassifier
from bertfit.model.inputs import WORD_IDS
from bertfit.tf_build import require_tensorflow, tensorflow_importable
from bertfit.training.backends import backend_of
from bertfit.training.setup import RunSetup, assemble, run_tokenizer, shard_tokenizer

if TYPE_CHECKING:
    import tensorflow as tf

TPU_REPLICAS = 8  # a v2-8 / v3-8 host: 8 cores


def check(
    config: RunConfig | None = None,
    *,
    dataset: tf.data.Dataset | None = None,
    encoder=None,
    model: keras.Model | None = None,
    tokenizer=None,
    num_classes: int | None = None,
    pooling: str = "cls",
    target: str = "cpu",
    replicas: int | None = None,
    sample_batches: int = 8,
    max_rows: int | None = 50_000,
    compile: bool | None = None,
    full_compile: bool = False,
    device_memory: int | None = None,
) -> Report:
    """Finds shape, dtype, input, data and gradient problems without training.

    Args:
        config: a `RunConfig`, checked as `bertfit train` would run it (data files, tokenizer,
            bucketed pipeline, the exact compiled replica step). Or, instead:
        dataset: a user's `tf.data.Dataset` of `(features, labels[, weights])` or dicts, batched
            to the global batch, checked with `encoder` (or a whole `model` giving logits).
        tokenizer: optional, gives the [CLS] id for the dataset checks.
        num_classes, pooling: the head put on `encoder` for the gradient and compile checks.
        target: "tpu", "gpu" or "cpu": the hardware the findings are judged for.
        replicas: data-parallel replicas (default: 8 for tpu, else --cpu-replicas or 1).
        sample_batches: how many dataset batches the value checks read (counted in the report).
        max_rows: tokenize at most this many rows per file for the length checks.
        compile: XLA-compile the replica step for every input shape. None (the default):
            for a `config`, when its training will compile (any TPU or GPU target; a CPU one
            only with `jit_compile` true), so that a CPU check takes seconds, and the report
            says it skipped the compilation; for a `dataset`, always.
        full_compile: run XLA's backend too where the target is this machine (slower).
        device_memory: bytes of memory per replica on the target (`--device-memory 16GB`):
            whether the predicted peak of a training step fits, and which setting makes it
            fit when it does not (`checks.memory`). Default, for a `config` on a "cpu"
            target: this machine's memory.

    Returns:
        a `Report`: `report.findings`, `report.codes`, `report.exit_code(strict)`.

    Examples:
    >>> report = bertfit.check(dataset=ds, encoder=encoder, target="tpu")  # doctest: +SKIP
    >>> print(report.render())  # doctest: +SKIP
    """
    if target not in TARGETS:
        raise BertfitError(f"target must be one of {TARGETS}, got {target!r}")
    start = time.perf_counter()
    report = Report(target=target)
    if dataset is not None:
        _check_dataset(
            report,
            dataset,
            encoder,
            model,
            tokenizer,
            num_classes or 2,
            pooling,
            replicas or (TPU_REPLICAS if target == "tpu" else 1),
            sample_batches,
            compile is not False,
            full_compile,
        )
    elif config is not None:
        _check_run(report, config, replicas, max_rows, compile, full_compile, device_memory)
    else:
        raise BertfitError("check() needs a RunConfig, or dataset= with encoder= or model=")
    report.seconds = time.perf_counter() - start
    return report


def check_precision(report: Report, precision: str, target: str) -> None:
    where = f"--precision {precision}"
    if target == "tpu" and precision == "mixed_fp16":
        report.add(
            "dtype-precision-unsupported",
            ERROR,
            "float16 on a TPU",
            where=where,
            why="TPUs compute in bfloat16; float16 is not supported",
            fix="use --precision mixed_bf16 (no loss scaling needed)",
        )
    elif target == "cpu" and precision == "mixed_fp16":
        report.add(
            "dtype-precision-unsupported",
            ERROR,
            "float16 on a CPU",
            where=where,
            why="float16 training (loss scaling, float16 kernels) needs a GPU; on a CPU the "
            "run fails at its first step",
            fix="use --precision mixed_bf16 or fp32 on a CPU",
        )
    elif target == "cpu" and precision != "fp32":
        report.add(
            "dtype-precision-unsupported",
            WARNING,
            f"{precision} on a CPU",
            where=where,
            why="most CPUs emulate 16-bit floats: slower than fp32, and less accurate",
            fix="use --precision fp32 on CPU; keep bf16 for TPU and recent GPUs",
        )
    elif target == "gpu" and "bf16" in precision and tensorflow_importable():
        import tensorflow as tf

        old = [
            d
            for d in tf.config.list_physical_devices("GPU")
            if (tf.config.experimental.get_device_details(d).get("compute_capability") or (8, 0))[0]
            < 8
        ]
        if old:
            report.add(
                "dtype-precision-unsupported",
                WARNING,
                "bfloat16 on a GPU older than Ampere",
                where=where,
                why="pre-Ampere GPUs have no bfloat16 units",
                fix="use --precision mixed_fp16 (with loss scaling) on this GPU",
            )


# ---- bertfit's own pipeline ----


def _check_run(
    report: Report, config: RunConfig, replicas, max_rows, compile_, full, device_memory=None
) -> None:
    target = report.target
    try:
        config.validate()
        window_spec(config)  # what --long-documents chunk cannot do (pairs, --streaming)
        backend_of(config).check(config)  # what the backend refuses; Keras' backend here
    except BertfitError as e:
        report.add("config-invalid", ERROR, str(e), where="run config")
        return
    replicas = replicas or (
        TPU_REPLICAS if target == "tpu" else backend_of(config).local_replicas(config)
    )
    check_precision(report, config.model.precision, target)
    if target == "cpu":
        try:  # what `bertfit train` refuses on this machine before it starts
            backend_of(config).check_machine(config)
        except ConfigError as e:
            where = f"--strategy {config.train.strategy}"
            report.add("config-invalid", ERROR, str(e), where=where)
    expected = BatchExpectations(
        target=target,
        replicas=replicas,
        source=f"--batch-size {config.train.batch_size}",
        batch_setting="--batch-size",
    )
    if config.train.batch_size is not None:  # else the run picks one that divides
        check_batch_size(report, config.train.batch_size, expected)
    checkpoint, tokenizer = _checked_checkpoint(report, config)
    if is_prepared(config.data.train):
        if tokenizer is not None:
            _check_prepared(
                report, config, checkpoint, tokenizer, replicas, expected, compile_, device_memory
            )
        return

    train = read_checked(report, config.data.train, config, "training")
    evaluation = (
        read_checked(report, config.data.eval, config, "evaluation") if config.data.eval else None
    )
    if train is None:
        return
    report.stats["training rows"] = len(train)
    train = train[: config.data.max_train_examples]
    check_jsonl_types(report, config.data.train, config)
    task = check_labels(report, train, config.data.train, config)
    if evaluation is not None:
        report.stats["evaluation rows"] = len(evaluation)
        check_eval(report, train, evaluation, config.data.eval, config.data.train, task)
    if tokenizer is None:
        return
    positions = checkpoint.config.max_sequence_length if checkpoint.config else None
    data = check_lengths(report, train, tokenizer, config, config.data.train, max_rows, positions)
    if evaluation is not None:
        check_lengths(report, evaluation, tokenizer, config, config.data.eval, max_rows, positions)
    if task is None or "shape-batch-not-divisible" in report.codes:
        return
    data.labels = task.targets(data.examples, config.data.train)
    strategy = backend_of(config).input_strategy()
    setup = assemble(
        config,
        strategy,
        backend_of(config).target_xla(config, target, strategy),
        checkpoint,
        tokenizer,
        task,
        data,
        rows_read=len(train),
        total_steps=1,
        replicas=replicas,
    )
    report.stats["pooling"] = _chosen(setup, "pooling: ", setup.config.model.pooling)
    _report_schedule(report, setup, config, expected)
    report.stats["length buckets"] = _buckets_chosen(setup)
    if setup.packing is not None:
        report.stats["packing"] = _chosen(setup, "packing: ", setup.packing.describe())
    _check_pipeline(report, setup, replicas, expected, compile_, full, device_memory)


def _check_prepared(
    report: Report,
    config: RunConfig,
    checkpoint,
    tokenizer,
    replicas,
    expected,
    compile_,
    device_memory=None,
) -> None:
    """A prepared training set (`bertfit prepare`): the task, the row count and the lengths
    come from its manifest, and the pipeline check reads only the first batch of each bucket
    from the shards: nothing reads every row, and the report says what was sampled."""
    where = str(config.data.train)
    try:
        require_tensorflow(
            "a prepared training set",
            "--backend jax reads a data file's rows in memory without it",
        )
        from bertfit.data.stream_source import check_stream
        from bertfit.data.streaming import TrainStream

        directory = prepared_directory(config.data.train)
        train = TrainStream(directory, Manifest.load(directory))
        check_stream(train.manifest, config, shard_tokenizer(checkpoint, config), where)
    except BertfitError as e:
        report.add(getattr(e, "code", "data-prepared-unusable"), ERROR, str(e), where=where)
        return
    manifest = train.manifest
    report.stats["training rows"] = (
        f"{manifest.rows} in {len(manifest.shards)} shards (from the manifest; the pipeline "
        "check samples the first batch of each bucket, no other row is read)"
    )
    histogram = manifest.histogram()
    at_limit = sum(rows for length, rows in histogram.items() if length >= manifest.max_seq_length)
    truncated = at_limit / max(manifest.rows, 1)
    report.stats["training rows at max_seq_length (truncated or exactly that long)"] = (
        f"{truncated:.1%}"
    )
    evaluation = None
    if config.data.eval:
        rows = read_checked(report, config.data.eval, config, "evaluation")
        if rows is None:
            return
        report.stats["evaluation rows"] = len(rows)
        try:
            evaluation = encode_labelled(config.data.eval, rows, config, tokenizer, manifest.task)
        except DataError as e:
            why = "the evaluation labels must be labels of the prepared training set"
            data_error_finding(report, e, "evaluation", why, "fix the label, or prepare again")
            return
    strategy = backend_of(config).input_strategy()
    xla = backend_of(config).target_xla(config, report.target, strategy)
    setup = assemble(
        config,
        strategy,
        xla,
        checkpoint,
        tokenizer,
        manifest.task,
        train,
        evaluation,
        total_steps=1,
        replicas=replicas,
    )
    report.stats["pooling"] = _chosen(setup, "pooling: ", setup.config.model.pooling)
    _report_schedule(report, setup, config, expected)
    report.stats["length buckets"] = _buckets_chosen(setup)
    _check_pipeline(report, setup, replicas, expected, compile_, False, device_memory)


def _report_schedule(
    report: Report, setup: RunSetup, config: RunConfig, expected: BatchExpectations
) -> None:
    """The batch size and epochs `bertfit train` will use, and why (see `_chosen`); a batch
    size chosen for the rows (no --batch-size) is judged here as a given one is up front."""
    t = setup.config.train
    schedule = f"batch size {t.batch_size}, {t.epochs} epochs"
    report.stats["schedule"] = _chosen(setup, "schedule: ", schedule)
    if config.train.batch_size is None:
        chosen = dataclasses.replace(expected, source=f"{schedule} chosen for the rows")
        check_batch_size(report, t.batch_size, chosen)


def _buckets_chosen(setup: RunSetup) -> str:
    """The buckets `bertfit train` will use, and why (see `_chosen`)."""
    return _chosen(setup, "length buckets ", ", ".join(map(str, setup.buckets)))


def _chosen(setup: RunSetup, prefix: str, value: str) -> str:
    """What `bertfit train` will use, and why: the setup's note that starts with `prefix`,
    less those words (the report's key says them), else `value`."""
    note = next((n for n in setup.notes if n.startswith(prefix)), None)
    return note.removeprefix(prefix) if note else value


def _compiles(report: Report, setup: RunSetup, asked: bool | None) -> bool:
    """Whether to XLA-compile the replica step: as asked (--compile, --no-compile), else when
    training will (`setup.xla`, decided by `assemble` for the target). A skip is said in the
    report with how to ask for the compilation."""
    if asked is not None:
        return asked
    if setup.xla.replica_step:
        return True
    report.stats["XLA compilation"] = (
        f"skipped: training here does not use XLA ({setup.xla.reason}); --compile compiles "
        "every bucket anyway, --target tpu (or gpu) rehearses that hardware"
    )
    return False


def _checked_checkpoint(report: Report, config: RunConfig) -> tuple:
    """The run's checkpoint and tokenizer as `train` loads them, or (None, None) with a
    finding when it cannot train; what loading warns of (`CheckpointWarning`) is a warning
    finding of the warning's code."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CheckpointWarning)
        loaded = _loaded_checkpoint(report, config)
    for warning in caught:
        if issubclass(warning.category, CheckpointWarning):
            code, message = warning.message.code, str(warning.message)
            report.add(code, WARNING, message, where=config.model.name)
        else:  # not ours to judge: shown as it would have been
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return loaded


def _loaded_checkpoint(report: Report, config: RunConfig) -> tuple:
    try:
        path = resolve(config.model.name)
        found = detect(path)
        if found.format in (SIGNATURE_ONLY, TF1_SAVEDMODEL):
            report.add(
                "grad-signature-only",
                ERROR,
                "the checkpoint is a signature-only SavedModel with zero trainable variables",
                where=str(path),
                why=SIGNATURE_ONLY_WHY,
                fix=signature_only_fix(found.savedmodel.tf1),
            )
            return None, None
        checkpoint = read_detection(found)
        tokenizer = run_tokenizer(checkpoint, config)
        _check_positions(report, config, checkpoint)
        declared = declared_pooling(checkpoint.path)
    except CheckpointError as e:
        report.add(
            "model-unloadable",
            ERROR,
            str(e),
            where=config.model.name,
            fix="`bertfit inspect PATH` says what the checkpoint is",
        )
        return None, None
    try:  # what `assemble` will refuse: a declared pooling bertfit does not have
        decide_pooling(config.model.pooling, declared, config.model.name)
    except ConfigError as e:
        report.add("config-invalid", ERROR, str(e), where="--pooling")
        return None, None
    return checkpoint, tokenizer


def _check_positions(report: Report, config: RunConfig, checkpoint) -> None:
    if checkpoint.config is None:
        return
    try:
        check_positions(
            config.model.max_seq_length,
            checkpoint.config.max_sequence_length,
            config.model.name,
        )
    except ConfigError as e:
        report.add(
            "shape-seq-exceeds-positions",
            ERROR,
            str(e),
            where=config.model.name,
            why="positions past the table do not exist: without XLA the step fails on "
            "long inputs, with XLA the positions would be clamped and the numbers wrong",
        )


def _element_specs(pipeline) -> dict | None:
    """Each bucket's tf.data element spec; None for batches made in NumPy on the host, which
    have none."""
    datasets = getattr(pipeline, "datasets", None)
    return None if datasets is None else {k: d.element_spec for k, d in datasets.items()}


def _class_id_spec(spec, task):
    """An element's spec as the dtype check takes it: it reads labels as integer class ids,
    which only a single-label run has; multi-label (multi-hot rows) and regression (values)
    targets are float by design, so they are left out (the gradient check and the compiled
    step use the run's own loss on them)."""
    if task.kind == SINGLE_LABEL:
        return spec
    features, _, weights = split_element(spec)
    return (features, None, weights)


def _check_pipeline(
    report: Report,
    setup: RunSetup,
    replicas: int,
    expected: BatchExpectations,
    compile_,
    full,
    device_memory: int | None = None,
) -> None:
    """The run's own setup (`training.setup.assemble`) for one replica: its share of each
    step's batch, the classifier at the run's precision, and the replica step the run
    compiles."""
    config, trainer, task = setup.config, setup.trainer, setup.task
    per_replica = config.train.batch_size // replicas
    pipeline = setup.batches(
        setup.train,
        shuffle=False,
        training=True,
        batch_size=per_replica,
        # the bucket lengths XLA and TPUs need; a CPU run without XLA pads each batch to its
        # longest row inside the same buckets, so its shapes are at most these
        static_shapes=True,
    )
    iterators = pipeline.iterators()
    buckets = sorted(iterators)
    report.stats["buckets used"] = buckets
    checkpoint, tokenizer = setup.checkpoint, setup.tokenizer
    per_bucket = BatchExpectations(
        target=expected.target,
        replicas=replicas,
        global_batch=False,
        vocab_size=checkpoint.config.vocab_size,
        type_vocab_size=checkpoint.config.type_vocab_size or None,  # 0: types are ignored
        cls_id=tokenizer.special_ids["cls_id"],
        source="bertfit pipeline",
    )
    specs = _element_specs(pipeline)
    if specs is None:
        report.not_checked.append(
            "not checked: a tf.data element spec (keys, dtypes, static shapes): with --backend "
            "jax the batches are NumPy arrays made on the host at the bucket lengths (their "
            "values are checked)"
        )
    stats = BatchStats()
    firsts = []
    for bucket in buckets:
        if specs is not None:
            check_spec(report, _class_id_spec(specs[bucket], task), per_bucket)
        element = next(iterators[bucket])
        firsts.append(element)
        observe_batch(stats, element, per_bucket)
    report_batches(report, stats, per_bucket)

    # the one part that differs by backend
    STEP_CHECKS[config.train.backend](report, setup, firsts, replicas, compile_, full)
    compute = dtype_bytes(trainer.model.encoder.dtype_policy.compute_dtype)
    # [batch, length], or for windowed documents [batch, K, max_seq_length]
    shapes = [(per_replica, *setup.train.row_shape(k)) for k in buckets]
    if setup.packing is not None:  # one replica's packed rows
        shapes = [(setup.packing.rows // replicas, setup.packing.length)]
    report.memory = memory_per_replica(trainer.model, shapes, compute, config.train.remat)
    asked = device_memory is not None  # else this machine's memory, said only when short
    if not asked and expected.target == "cpu":
        device_memory = host_memory()
    if device_memory is not None:
        encoder = trainer.model.encoder
        head = report.memory["trainable_parameters"] - sum(
            math.prod(v.shape) for v in encoder.trainable_weights
        )
        m = config.model
        lora = getattr(m, "lora_rank", None) == 0  # where --lora-rank exists
        base = BASE_BYTES[m.base_precision] if getattr(m, "lora_rank", 0) else None
        where = f"{m.name}, --batch-size {config.train.batch_size} over {replicas}"
        report_fit(report, report.memory, device_memory, where, head, lora, asked, base_bytes=base)


def _check_jax_step(report: Report, setup: RunSetup, firsts: list, replicas, compile_, full):
    """The gradients on the first batch through the `JaxTrainer`'s own code, then its train
    step compiled ahead of time per bucket and the first bucket's run twice, one call each,
    as a run takes them (`checks/jax_step.py`)."""
    from bertfit.checks.jax_step import check_jax_gradients, check_two_steps, compile_buckets

    trainer, where = setup.trainer, setup.config.model.name
    check_jax_gradients(report, trainer, firsts[0], replicas, where)
    if _compiles(report, setup, compile_) and "grad-step-failed" not in report.codes:
        first = compile_buckets(report, trainer, firsts, replicas)[0]
        if first is not None:  # the first bucket's step, run twice
            check_two_steps(report, trainer, firsts[0], replicas, where, first)


def _check_tensorflow_step(
    report: Report, setup: RunSetup, firsts: list, replicas, compile_, full
) -> None:
    """One gradient step on the first batch, then the replica step XLA-compiled per bucket."""
    trainer = setup.trainer
    check_gradients(  # with the run's own loss: regression and multi-label targets are floats
        report,
        trainer.model,
        firsts[0],
        excluded=trainer.frozen,
        where=setup.config.model.name,
        kind=setup.task.kind,
        declared_pooling=setup.declared_pooling,
    )
    if _compiles(report, setup, compile_) and not {"grad-none", "grad-step-failed"} & set(
        report.codes
    ):
        compile_shapes(report, trainer.replica_step, firsts, report.target, "replica step", full)


# ---- a user's dataset ----


# `bertfit check`'s step: the one part of it that differs by backend
STEP_CHECKS = {TENSORFLOW_BACKEND: _check_tensorflow_step, JAX_BACKEND: _check_jax_step}


def _encoder_takes_text(model) -> bool:
    import tensorflow as tf  # a user's dataset and model: TensorFlow's

    inputs = getattr(model, "inputs", None)
    try:
        return bool(inputs) and all(tf.as_dtype(t.dtype) == tf.string for t in inputs)
    except (TypeError, AttributeError, ValueError):
        return False


def _check_dataset(
    report,
    dataset,
    encoder,
    model,
    tokenizer,
    num_classes,
    pooling,
    replicas,
    sample_batches,
    compile_,
    full,
) -> None:
    if encoder is None and model is None:
        raise BertfitError(
            "check(dataset=...) needs encoder= (a bertfit encoder) or model= "
            "(a Keras model from features to logits)"
        )
    config = getattr(encoder, "config", None)
    takes_text = _encoder_takes_text(model if model is not None else encoder)
    expected = BatchExpectations(
        target=report.target,
        replicas=replicas,
        vocab_size=getattr(config, "vocab_size", None),
        type_vocab_size=getattr(config, "type_vocab_size", None) or None,
        cls_id=getattr(tokenizer, "cls_id", None),
        encoder_takes_text=takes_text,
        source="dataset",
    )
    check_spec(report, dataset.element_spec, expected)
    blocking = {
        "input-raw-strings",
        "input-ids-to-text-encoder",
        "input-key-names",
        "input-missing",
        "dtype-float-ids",
    }
    stats = BatchStats()
    samples = []
    for element in itertools.islice(dataset, sample_batches):
        samples.append(element)
        observe_batch(stats, element, expected)
    report.stats["dataset batches sampled"] = (
        f"{len(samples)} (the first {sample_batches}; the rest were not read)"
        if len(samples) == sample_batches
        else f"{len(samples)} (all)"
    )
    report_batches(report, stats, expected)
    if not samples or blocking & set(report.codes) or (takes_text and model is None):
        return
    if model is None:
        if getattr(encoder, "config", None) is None:  # a wrapped SavedModel: no head to add
            if not encoder.trainable_weights:
                no_encoder_variables(report, encoder, "encoder")
            return
        model = BertClassifier(encoder, num_classes, pooling, dropout=0.0)
    check_gradients(report, model, samples[0], encoder=encoder, where="model")
    if compile_ and "grad-step-failed" not in report.codes:  # the same failure, said once
        shapes, distinct = [], []
        for element in samples:
            ids = canonical(split_element(element)[0]).get(WORD_IDS)
            key = tuple(ids.shape) if ids is not None else None
            if key not in shapes:
                shapes.append(key)
                distinct.append(element)
        variables = list(model.trainable_variables)
        compile_shapes(
            report, replica_step(model, variables), distinct, report.target, "replica step", full
        )
        if len(distinct) > 1:
            report.add(
                "shape-recompiles",
                ERROR if report.target == "tpu" else WARNING,
                f"{len(distinct)} different input shapes in the first {len(samples)} "
                f"batches: {[list(s) for s in shapes]}",
                where="dataset",
                why="the step is compiled once per shape; with per-batch padding that is "
                "once per batch, and a TPU run stalls on compilation",
                fix="pad to fixed lengths (a few buckets at most) and fixed batch sizes",
            )
        report.memory = dataset_memory(model, distinct, replicas)
