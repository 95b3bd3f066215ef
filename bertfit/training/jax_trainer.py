"""`JaxTrainer`: the training step on Keras' JAX backend (`--backend jax`), for the TPUs and GPUs
that run JAX. It has `Trainer`'s contract with the run (`run_plan`, `predict`, `trace_counts`,
`compilations`, `trace_seconds`, `model`, `optimizer`, `schedule`), so `EpochRunner`, the
checkpoints and the run directory are the same code on both backends.

The step is one `jax.jit`-ted pure function over the weights, `JaxStep`'s (`training/jax_step.py`,
which imports nothing of TensorFlow): Keras' stateless API, `jax.value_and_grad`, global-norm
clipping, the run's AdamW, gradient accumulation as a `jax.lax.scan`. jit compiles once per
bucket shape; the Python body of the step runs only when it traces, and counts the traces. On
an x86 CPU the step's matrix products are oneDNN's (`jax_devices.compiler_options`). The compiled
steps are kept in JAX's persistent compilation cache (`use_compilation_cache`): a rerun of the
same shapes loads them instead of compiling (not a oneDNN step, which jaxlib 0.10.2 cannot
serialize).

Data parallelism (`jax_devices.DeviceSplit`): with several JAX devices (of this host, or of
every host once `jax_processes` joined them) the model and optimizer are replicated on every
device and each global batch is split along its rows; XLA's SPMD partitioner all-reduces the
gradients. The batches are NumPy arrays made on the host (`bertfit.data.host_input`: the data's
`input` with no strategy): global batches at the bucket lengths, the next ones made on a
background thread while the device computes. Every process follows the same plan of global
batches and makes only its share of each one's rows (`DeviceSplit.share`), which `DeviceSplit.put`
joins into the global batch; the predictions are gathered on every process, each row's index
read from the plan.

The step's state is donated (`jax_step`): XLA writes the new weights and optimizer slots over
the old ones, whose buffers are deleted. After every host call, and after a step that raised,
the weights, the optimizer's state and the dropout seeds are written back into the Keras
variables (a reference swap on JAX, no copy), so the Keras variables never hold a donated
buffer: a checkpoint saved between calls (`RunCheckpoints`), `predict` and `bertfit check` read
them, and a restored checkpoint is what the next call starts from. The frozen weights are not
donated, and stay in their variables as they are.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Collection, Iterator

import jax
import keras
import numpy as np

from bertfit.cache import cache_root
from bertfit.config import TrainConfig
from bertfit.data.host_input import HostInput
from bertfit.data.pipeline import INDEX, runs_of, scatter_outputs
from bertfit.data.tasks import SINGLE_LABEL
from bertfit.jax_devices import UNCACHEABLE_ONEDNN, DeviceSplit
from bertfit.model.inputs import features
from bertfit.training.jax_step import JaxStep
from bertfit.training.optimizer import make_optimizer, schedule_for

# under `cache_root()`: JAX's persistent compilation cache (`use_compilation_cache`)
COMPILATION_CACHE = "jax-compilations"


def use_compilation_cache() -> None:
    """Keeps the compiled steps in JAX's persistent compilation cache, under bertfit's cache
    (`$BERTFIT_CACHE/jax-compilations`) unless the user named one (`JAX_COMPILATION_CACHE_DIR`
    or `jax.config`): a run whose bucket shapes were compiled before (a rerun, a sweep's next
    trial, the next fold) loads each step's executable instead of compiling it again. The key
    is the step's HLO, the compile options, the devices and jaxlib's version, so a hit runs
    exactly what a compile would have made. The first run of a shape pays the compile. A
    oneDNN step (`jax_step.ONEDNN_DOTS`) cannot be written there: JAX's warning for it is
    silenced, the step compiled again by every run."""
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", str(cache_root() / COMPILATION_CACHE))
    warnings.filterwarnings("ignore", UNCACHEABLE_ONEDNN, UserWarning)


class JaxTrainer(JaxStep):
    """Owns the model, the optimizer and the jitted steps on the JAX backend.

    Args:
        build_model: makes the Keras model (in the data-parallel scope with several devices).
        config: optimisation settings (`TrainConfig`).
        total_steps: optimizer steps in the whole run (the learning-rate schedule); None for
            a trainer that only predicts.
        frozen: names of variables left out of training (e.g. an unused pooler).
        task_kind: single-label, multi-label or regression: the loss and the outputs.
        devices: the JAX devices the batch is split over (default: every device, those of
            every host in a multi-host run).
    """

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        config: TrainConfig,
        total_steps: int | None,
        frozen: tuple[str, ...] = (),
        task_kind: str = SINGLE_LABEL,
        devices: list | None = None,
    ):
        self.strategy = None  # no tf.distribute: the batches are made on the host
        self.split = DeviceSplit(devices)
        with self.split.scope():
            model = build_model()
            # Every weight exists (the checkpoint's, the head built with it); stateless_call
            # wants that said, where TensorFlow's first call says it itself.
            model.built = True
            variables = [
                v for v in model.trainable_variables if not any(f in v.path for f in frozen)
            ]
            optimizer = None
            if total_steps is not None:
                optimizer = make_optimizer(config, total_steps)
                optimizer.build(variables)
        super().__init__(model, optimizer, variables, config, task_kind)
        self.schedule = None if total_steps is None else schedule_for(config, total_steps)
        # wall time of the calls that traced (and compiled), per function
        self.trace_seconds = {"train_step": 0.0, "predict_step": 0.0}
        use_compilation_cache()
        # The state is donated: XLA updates the weights and the optimizer's slots in place,
        # not beside a second copy (the Keras variables get the new arrays back after the call).
        # The frozen weights (argument 1) are read only, and stay in their variables.
        options = self.split.compiler_options  # a CPU's products through oneDNN
        self._train_step = jax.jit(self._step, donate_argnums=0, compiler_options=options)
        self._batch_gradients = jax.jit(self._gradients, compiler_options=options)
        # gathered on every device: each process reads all rows back (several hosts)
        self._predict_step = jax.jit(
            self._probabilities, out_shardings=self.split.gathered, compiler_options=options
        )

    @property
    def replicas(self) -> int:
        """The devices each global batch is split over."""
        return self.split.replicas

    def parallelism(self) -> dict:
        """How the run splits its batches: over the JAX devices (keras.distribution)."""
        return self.split.parallelism()

    # ---- the state in the Keras variables (`JaxStep._read_state` reads it) ----

    def _write_state(self, state: tuple) -> None:
        trained, non_trainable, optimizer_variables = state
        pairs = (
            (self.variables, trained),
            (self.model.non_trainable_variables, non_trainable),
            (self.optimizer.variables, optimizer_variables),
        )
        for variables, values in pairs:
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)

    def gradients(self, batch: dict) -> tuple[list[np.ndarray], float]:
        """The gradients of one global batch's loss (a pipeline batch less the example index)
        for the trained variables, in `variables`' order, as the train step takes them
        before clipping, and the loss; nothing is updated (`bertfit check`). One jitted
        computation: run op by op, JAX would compile each op of the model apart."""
        trained, non_trainable, _ = self._read_state()
        fixed = self._read_fixed()
        with self.split.random_bits():
            batch = self.split.put(batch)
            gradients, loss, _ = self._batch_gradients(trained, fixed, non_trainable, batch)
        return [np.asarray(g) for g in gradients], float(loss)

    def compile_train_step(self, batch: dict):
        """The train step compiled ahead of time for one global batch's shapes, as the run's
        first step on that bucket compiles it, and nothing run (`bertfit check`): `batch` maps
        the pipeline's names (less the example index) to `jax.ShapeDtypeStruct`s. Returns
        `jax.stages.Compiled` (its `memory_analysis()` is XLA's plan for the step)."""
        state, fixed = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
            (self._read_state(), self._read_fixed()),
        )
        batch = self.split.shapes(batch)  # split along its rows, as `put` splits a batch
        with self.split.random_bits():
            return self._train_step.lower(state, fixed, batch).compile()

    # ---- host loops ----

    def run_plan(
        self, data: HostInput, ends: Collection[int] = ()
    ) -> Iterator[list[tuple[float, float]]]:
        """Takes the steps of `data.plan` in order, as `Trainer.run_plan`: consecutive steps
        of one bucket, up to `steps_per_execution`, between two yields of their (loss,
        gradient norm); the Keras variables hold the state at every yield."""
        iterators = data.iterators(self.split.share)
        limit = max(1, self.config.steps_per_execution)
        for seq_length, steps in runs_of(data.plan, limit, ends):
            with self._timing("train_step"):
                results = self.train_steps(iterators[seq_length], steps)
            yield [(float(loss), float(norm)) for loss, norm in results]

    def train_steps(self, iterator, steps, step=None) -> np.ndarray:
        """`steps` optimizer steps drawn from one bucket's iterator (as `Trainer.train_steps`;
        `bertfit doctor` times it): every step's loss and gradient norm, as [steps, 2]. The
        Keras variables hold the state before and after, and after a step that raised the
        state the steps before it made (each call donates the state it was given). `step`:
        the train step compiled ahead of time for this bucket (`compile_train_step`: `bertfit
        check` takes two steps with it), else the jitted one."""
        step = self._train_step if step is None else step
        state, fixed, results = self._read_state(), self._read_fixed(), []
        try:
            for _ in range(int(steps)):
                batch = next(iterator)
                batch = self.split.put({k: v for k, v in batch.items() if k != INDEX})
                with self.split.random_bits():
                    state, result = step(state, fixed, batch)
                results.append(result)
        finally:
            self._write_state(state)
        return np.asarray(jax.device_get(results))

    @contextlib.contextmanager
    def _timing(self, name: str):
        """Adds the call's wall time to `trace_seconds[name]` when it traced (and compiled)."""
        traces, start = self._traces[name], time.perf_counter()
        yield
        if self._traces[name] > traces:
            self.trace_seconds[name] += time.perf_counter() - start

    def predict(self, data: HostInput, num_examples: int, progress=None) -> np.ndarray:
        """Probabilities for every example, in the original order; padding rows are dropped.
        Each process makes its share of a batch's rows and reads every row's back."""
        trainable = [v.value for v in self.model.trainable_variables]
        non_trainable = [v.value for v in self.model.non_trainable_variables]
        iterators = data.iterators(self.split.share)

        def steps():
            for batch in data.plan:
                element = next(iterators[batch.seq_length])
                with self._timing("predict_step"):
                    inputs = self.split.put(features(element))
                    probabilities = self._predict_step(trainable, non_trainable, inputs)
                    probabilities = np.asarray(probabilities)
                yield probabilities, batch.indices  # every process's rows

        return scatter_outputs(steps(), num_examples, progress)

    def compilations(self) -> int:
        """XLA compilations so far: every trace of a jitted step (one per bucket shape; a
        step loaded from the persistent compilation cache counts as one too)."""
        return sum(self._traces.values())

    def trace_counts(self) -> dict[str, int]:
        """How often each step function was traced (once per bucket shape is the goal)."""
        return dict(self._traces)
