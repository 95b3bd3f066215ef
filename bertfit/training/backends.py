"""The Keras backend a run trains on, chosen once from `config.train.backend` (`backend_of`).

Everything that differs between the backends is a method of its `Backend`, and the rest of
bertfit calls through this seam, never by the backend's name:

- `check`: what the backend cannot run, refused before anything is loaded or written;
- `join`: a multi-host run's processes joined, and whether this one writes the run;
- `placement`: the input pipeline's `tf.distribute` strategy and what XLA compiles
  (`XlaChoice`) for `train` and `doctor`; `target_xla`, `local_replicas`: the same for
  `bertfit check`, which may judge another machine (`--target`), with `check_machine` and
  `input_strategy`; `chief`: whether this process writes the run, once the strategy is made;
  `replicas`: the devices each global batch splits over (`--packing` plans its rows by them);
- `tokenizer`, `input_pipelines`, and the strategy `placement` gives: how the texts become
  batches: the checkpoint's tokenizer in the graph and `tf.data` pipelines per replica, or
  (no strategy) the tokenizer and the batches on the host in NumPy (`data/host_input.py`);
- `trainer`: the `RunTrainer` that owns the model, the optimizer and the compiled steps;
- `devices`: the devices those steps run on, as `bertfit doctor` reports them.
- `seed`: the run's random streams (TensorFlow's only where the run uses TensorFlow).

TensorFlow (`TensorFlowBackend`): `tf.distribute` strategies, the replica step compiled by XLA
where it pays (`training/loop.py`). JAX (`JaxBackend`): one `jax.jit` step, data parallel over
every JAX device (`training/jax_trainer.py`), fed NumPy batches made on the host: it needs no
TensorFlow (`loads_tensorflow`). Each imports its framework when first used, so that choosing
one never loads the other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bertfit.config import (
    JAX_BACKEND,
    TENSORFLOW_BACKEND,
    RunConfig,
    TrainConfig,
    per_replica_batch,
)
from bertfit.errors import ConfigError

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from bertfit.checkpoints.base import Checkpoint
    from bertfit.data.pipeline import BucketedInput
    from bertfit.training.xla import XlaChoice


class RunTrainer(Protocol):
    """What a run needs of its trainer, on either backend (`loop.Trainer`,
    `jax_trainer.JaxTrainer`): the epochs, checkpoints, evaluation and `doctor` use only this."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer | None
    variables: list  # the trained variables
    schedule: Callable | None  # the learning rate at a step
    strategy: tf.distribute.Strategy | None  # the input pipeline's (None: batches on the host)
    trace_seconds: dict[str, float]  # wall time of the calls that traced, per step function

    @property
    def replicas(self) -> int:
        """The devices each global batch is split over."""

    def parallelism(self) -> dict:
        """How batches are split (metrics.json's "strategy"): {"name", "replicas"}."""

    def run_plan(
        self, data: BucketedInput, ends: Collection[int] = ()
    ) -> Iterator[list[tuple[float, float]]]:
        """The steps of `data.plan`, yielding each host call's (loss, gradient norm)s."""

    def train_steps(self, iterator, steps) -> np.ndarray:
        """`steps` optimizer steps from one bucket's iterator: [steps, 2] (loss, norm)."""

    def predict(self, data: BucketedInput, num_examples: int, progress=None) -> np.ndarray:
        """Every example's outputs, in the original order."""

    def compilations(self) -> int:
        """XLA compilations so far."""

    def trace_counts(self) -> dict[str, int]:
        """How often each step function was traced."""


class Backend(Protocol):
    """One Keras backend's way of running a run; see the module docstring."""

    name: str
    loads_tensorflow: bool  # whether its runs need TensorFlow (the CLI loads it first then)

    def check(self, config: RunConfig, distilling: bool = False) -> None:
        """Refuses what this backend does not run (ConfigError: the flag, why, the fix)."""

    def join(self) -> bool:
        """Joins the run's other processes where the backend has them; whether this process
        writes the run."""

    def placement(
        self, config: RunConfig, strategy: tf.distribute.Strategy | None = None
    ) -> tuple[tf.distribute.Strategy, XlaChoice]:
        """The input pipeline's strategy (`strategy` if given) and what XLA compiles, on this
        machine; the batch must split evenly over the replicas."""

    def chief(self, strategy: tf.distribute.Strategy | None) -> bool:
        """Whether this process writes the run, as far as its strategy says (`join` said the
        rest)."""

    def target_xla(
        self, config: RunConfig, target: str, strategy: tf.distribute.Strategy | None
    ) -> XlaChoice:
        """What XLA compiles when the run trains on `target` ("cpu", "gpu", "tpu")."""

    def local_replicas(self, config: RunConfig) -> int:
        """The replicas a batch is split over on this machine."""

    def replicas(self, strategy: tf.distribute.Strategy | None) -> int:
        """The replicas each global batch is split over, `placement`'s `strategy` given."""

    def check_machine(self, config: RunConfig) -> None:
        """Refuses what this machine cannot run of the run, as `train` does before it starts
        (`bertfit check` judging this machine; the precision is judged apart)."""

    def input_strategy(self) -> tf.distribute.Strategy | None:
        """What `bertfit check` makes one replica's batches under: TensorFlow's default
        strategy, or None where the batches are made on the host."""

    def tokenizer(self, checkpoint: Checkpoint, config: RunConfig):
        """The checkpoint's tokenizer (with `--lower-case`), where this backend's input
        pipeline runs it: in the graph, or on the host."""

    def input_pipelines(self, strategy: tf.distribute.Strategy | None) -> int:
        """The input pipelines the rows of each global batch are split among."""

    def trainer(
        self,
        build_model: Callable[[], keras.Model],
        config: RunConfig,
        strategy: tf.distribute.Strategy,
        total_steps: int,
        xla: XlaChoice,
        frozen: tuple[str, ...],
        task_kind: str,
    ) -> RunTrainer:
        """The run's trainer over the model `build_model` makes."""

    def devices(self, trainer: RunTrainer):
        """The devices the trainer's steps run on (`training/devices.py`)."""

    def pair_step(self, trainer: RunTrainer, variables: list, config: TrainConfig, plan):
        """`--few-shot`'s stage 1 step over `variables` of the trainer's model, for the
        batches of `plan` (`few_shot.FewShotPlan`) with `config`'s AdamW
        (`few_shot.PairStep`)."""

    def seed(self, seed: int) -> None:
        """Seeds every random stream the run draws from: Python's, NumPy's, Keras' (and
        TensorFlow's where the run uses it)."""


class TensorFlowBackend:
    """Keras on TensorFlow: any `tf.distribute` strategy, XLA where it pays."""

    name = TENSORFLOW_BACKEND
    loads_tensorflow = True

    def check(self, config: RunConfig, distilling: bool = False) -> None:
        check_keras_runs(self.name)

    def join(self) -> bool:
        return True  # a multi-worker strategy's chief is known once the strategy is made

    def placement(self, config, strategy=None):
        from bertfit.training.strategy import check_hardware, make_strategy
        from bertfit.training.xla import XlaChoice

        t = config.train
        if strategy is None:
            check_hardware(t.strategy, config.model.precision, t.cpu_replicas, t.tpu, t.jit_compile)
            strategy = make_strategy(t.strategy, t.cpu_replicas, t.tpu, t.workers, t.worker_index)
        if t.batch_size is not None:  # else `setup.assemble` picks one that divides
            per_replica_batch(t.batch_size, strategy.num_replicas_in_sync)
        return strategy, XlaChoice.for_run(t.jit_compile, strategy)

    def chief(self, strategy) -> bool:
        from bertfit.training.strategy import is_chief

        return is_chief(strategy)

    def target_xla(self, config, target, strategy):
        from bertfit.training.xla import XlaChoice

        return XlaChoice.for_target(target, config.train.jit_compile, strategy)

    def local_replicas(self, config: RunConfig) -> int:
        return config.train.cpu_replicas or 1

    def replicas(self, strategy) -> int:
        return strategy.num_replicas_in_sync

    def check_machine(self, config: RunConfig) -> None:
        from bertfit.training.strategy import check_hardware

        t = config.train
        check_hardware(t.strategy, "fp32", t.cpu_replicas, t.tpu)

    def input_strategy(self):
        import tensorflow as tf

        return tf.distribute.get_strategy()

    def tokenizer(self, checkpoint, config):
        from bertfit.checkpoints.load import build_tokenizer

        return build_tokenizer(checkpoint, lower_case=config.model.lower_case)

    def input_pipelines(self, strategy) -> int:
        from bertfit.data.streaming import input_pipelines

        return input_pipelines(strategy)

    def trainer(self, build_model, config, strategy, total_steps, xla, frozen, task_kind):
        from bertfit.training.loop import Trainer

        return Trainer(
            build_model,
            strategy,
            config.train,
            total_steps,
            frozen=frozen,
            loss_scale=config.model.precision == "mixed_fp16",
            task_kind=task_kind,
            xla=xla,
        )

    def devices(self, trainer: RunTrainer):
        from bertfit.training.devices import StrategyDevices

        return StrategyDevices(trainer.strategy)

    def pair_step(self, trainer, variables, config, plan):
        from bertfit.training.few_shot import TensorFlowPairStep

        return TensorFlowPairStep(trainer, variables, config, plan)

    def seed(self, seed):
        import keras

        keras.utils.set_random_seed(seed)


class JaxBackend:
    """Keras on JAX: one `jax.jit` step, data parallel over every JAX device (of every host,
    once `join` joined them), fed global batches at the bucket lengths (jax.jit compiles each
    shape once), tokenized and made in NumPy on the host, each process making its share of
    their rows: no TensorFlow, no strategy."""

    name = JAX_BACKEND
    loads_tensorflow = False

    def check(self, config: RunConfig, distilling: bool = False) -> None:
        from bertfit.training.jax_processes import AUTO, COORDINATOR, cluster_arguments

        t = config.train
        for given, flag in (
            (t.strategy not in ("auto", "default"), f"--strategy {t.strategy}"),
            (bool(t.tpu), "--tpu"),
            (bool(t.workers), "--workers"),
            (bool(t.cpu_replicas), "--cpu-replicas"),
        ):
            if given:
                raise ConfigError(
                    f"{flag} is a tf.distribute setting; with --backend jax the batch is split "
                    "over every local JAX device (keras.distribution.DataParallel): leave it out "
                    "(on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N rehearses N "
                    "devices)."
                )
        refusals = [
            (
                config.model.precision == "mixed_fp16",
                "--precision mixed_fp16 (float16 loss scaling) is TensorFlow's only so far; "
                "use --precision mixed_bf16 or fp32 with --backend jax",
            ),
            (
                t.jit_compile is False,
                "--jit-compile false: --backend jax compiles every step with jax.jit; leave "
                "--jit-compile out",
            ),
            (
                distilling and cluster_arguments(os.environ) is not None,
                "bertfit distill --backend jax runs in one process so far (its teacher labels "
                "the rows before a multi-host run's processes could join); unset "
                f"{COORDINATOR} and {AUTO}",
            ),
        ]
        for refused, message in refusals:
            if refused:
                raise ConfigError(message + ".")
        check_keras_runs(self.name)

    def join(self) -> bool:
        # before any JAX computation; on one host nothing to join
        from bertfit.training.jax_processes import is_first_process, join_jax_processes

        join_jax_processes()
        return is_first_process()

    def placement(self, config, strategy=None):
        import jax

        from bertfit.training.xla import JAX_XLA

        if strategy is not None:
            raise ConfigError("a tf.distribute strategy cannot train with --backend jax")
        from bertfit.jax_devices import process_share

        process_share(jax.devices())  # every process an equal share of each batch
        if config.train.batch_size is not None:  # else `setup.assemble` picks one that divides
            per_replica_batch(config.train.batch_size, jax.device_count())
        return None, JAX_XLA

    def chief(self, strategy) -> bool:
        return True  # `join` decided: JAX's first process

    def target_xla(self, config, target, strategy):
        from bertfit.training.xla import JAX_XLA

        return JAX_XLA  # the whole step, on every target

    def local_replicas(self, config: RunConfig) -> int:
        import jax

        return jax.local_device_count()

    def replicas(self, strategy) -> int:
        import jax

        return jax.device_count()  # every host's: the batch splits over them all

    def check_machine(self, config: RunConfig) -> None:
        pass  # `check` refused tf.distribute's settings; JAX runs on the devices it has

    def input_strategy(self):
        return None

    def tokenizer(self, checkpoint, config):
        from bertfit.checkpoints.load import build_host_tokenizer

        return build_host_tokenizer(checkpoint, lower_case=config.model.lower_case)

    def input_pipelines(self, strategy) -> int:
        return 1  # one plan of global batches; each process makes its share (`DeviceSplit`)

    def trainer(self, build_model, config, strategy, total_steps, xla, frozen, task_kind):
        from bertfit.training.jax_trainer import JaxTrainer

        return JaxTrainer(build_model, config.train, total_steps, frozen, task_kind)

    def devices(self, trainer: RunTrainer):
        from bertfit.training.devices import JaxDevices

        return JaxDevices(trainer.split)

    def pair_step(self, trainer, variables, config, plan):
        from bertfit.training.few_shot import JaxPairStep

        return JaxPairStep(trainer, variables, config, plan)

    def seed(self, seed):
        # keras.utils.set_random_seed less TensorFlow's seed, which Keras sets whenever
        # TensorFlow is installed, importing it: a JAX run draws nothing from TensorFlow (it is
        # the same run where TensorFlow is not installed), and its start would cost ~3 s.
        import random

        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
        from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

        global_state.set_global_attribute(GLOBAL_RANDOM_SEED, seed)
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, None)
        random.seed(seed)
        np.random.seed(seed)


BACKENDS: dict[str, Backend] = {b.name: b for b in (TensorFlowBackend(), JaxBackend())}


def backend_of(config: RunConfig) -> Backend:
    """The backend `config.train.backend` names."""
    try:
        return BACKENDS[config.train.backend]
    except KeyError:
        raise ConfigError(
            f"--backend {config.train.backend!r}: expected one of {', '.join(BACKENDS)}."
        ) from None


def check_keras_runs(name: str) -> None:
    """Refuses a backend this process's Keras does not run on (it reads KERAS_BACKEND once,
    when imported)."""
    import keras

    running = keras.backend.backend()
    if running != name:
        raise ConfigError(
            f"--backend {name}: Keras runs on {running} in this process (it reads "
            "KERAS_BACKEND once, when imported). `bertfit train`, `distill`, `doctor`, "
            "`check`, `tune` and `audit` with --backend jax set it; from Python set "
            "KERAS_BACKEND before importing bertfit."
        )
