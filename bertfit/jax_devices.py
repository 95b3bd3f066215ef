"""The JAX devices a `--backend jax` step runs on, for training and prediction alike: how a
global batch is split over them (`DeviceSplit`) and how XLA compiles for them
(`compiler_options`). Nothing of TensorFlow: a GPU box or TPU VM without it imports this.

Data parallelism: with several JAX devices (of this host, or of every host once
`training/jax_processes` joined them) the model is built in a `keras.distribution.DataParallel`
scope (its variables replicated on every device) and each global batch is put on the devices
split along its rows; XLA's SPMD partitioner all-reduces what needs it. The devices are taken
process by process, so each process's devices hold one contiguous part of every global batch's
rows, the processes' parts in process order: a process makes only its part (`DeviceSplit.share`)
and `jax.make_array_from_process_local_data` joins the parts into the global batch.
"""

from __future__ import annotations

import collections
import contextlib
import os
import platform

import jax
import keras
import numpy as np

from bertfit.errors import ConfigError

# XLA:CPU computes a matrix product with its own kernels unless told to hand each one to
# oneDNN, the library TensorFlow's CPU kernels call: MiniLM-L6's train step at batch 32 then
# takes 0.91-0.96x the time (seq 16: 170 vs 177 ms, 40: 365 vs 393, 80: 728 vs 798, 128: 1,266
# vs 1,332; 2-core Xeon with AVX-512, jaxlib 0.10.2), the same losses. The fused variant
# (LIBRARY_FUSION_TYPE_DOT) fails to compile the step there; XNNPACK's and YNNPACK's dots were
# no faster. The price: jaxlib 0.10.2 cannot serialize a oneDNN step, so JAX's persistent
# compilation cache cannot keep it (a rerun compiles again; `ONEDNN_SWITCH`=0 keeps XLA's own
# kernels, which it keeps). The x86 guard: oneDNN's fusions are not built for every CPU.
ONEDNN_DOTS = {
    "xla_cpu_use_onednn": True,
    "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
}
ONEDNN_SWITCH = "BERTFIT_JAX_ONEDNN"
# what JAX warns at every oneDNN step it cannot write to the persistent cache
UNCACHEABLE_ONEDNN = r"Error writing persistent compilation cache entry .*onednn"


def compiler_options(devices: list) -> dict | None:
    """`jax.jit`'s compiler options for a step on `devices`: oneDNN's matrix products on x86
    CPUs (ONEDNN_DOTS) unless `BERTFIT_JAX_ONEDNN=0`; XLA's defaults elsewhere (GPUs and TPUs
    have their own libraries)."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    wanted = os.environ.get(ONEDNN_SWITCH, "1") != "0"
    if wanted and x86 and all(device.platform == "cpu" for device in devices):
        return dict(ONEDNN_DOTS)
    return None


class DeviceSplit:
    """Global batches split along their rows over JAX devices (none split on one device).

    Args:
        devices: the JAX devices (default: every device, those of every host in a multi-host
            run).

    Attributes:
        share: this process's rows of each global batch (`process_share`), as
            `HostInput.iterators` takes it: (0, 1), all of them, on one process.
    """

    def __init__(self, devices: list | None = None):
        devices = jax.devices() if devices is None else devices
        # process by process (stable: one process's devices keep their order)
        self.devices = sorted(devices, key=lambda device: device.process_index)
        self.share = process_share(self.devices)
        self.distribution = (
            keras.distribution.DataParallel(devices=self.devices) if len(self.devices) > 1 else None
        )
        mesh = jax.sharding.Mesh(np.asarray(self.devices), ("batch",))
        # an array split along its rows over the devices; a scalar on every one
        self.rows, self.whole = (
            jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*axes))
            for axes in (("batch",), ())
        )
        self.compiler_options = compiler_options(self.devices)

    @property
    def replicas(self) -> int:
        """The devices each global batch is split over."""
        return len(self.devices)

    @property
    def gathered(self) -> jax.sharding.Sharding | None:
        """The outputs' sharding when every process reads all rows back: whole on every
        device with several devices (several hosts), JAX's choice on one."""
        return self.whole if self.distribution else None

    def parallelism(self) -> dict:
        """How batches are split, as a run's metrics.json records it."""
        name = "DataParallel" if self.distribution is not None else "OneDevice"
        return {"name": f"jax {name}", "replicas": self.replicas}

    def scope(self):
        """Where the model and its optimizer are built: replicated on every device."""
        return self.distribution.scope() if self.distribution else contextlib.nullcontext()

    def random_bits(self):
        """Where the dropout masks' random bits are drawn (read when a step is lowered, so
        every call of a jitted step sits in it). Split over several devices, JAX's
        partitionable threefry: each device draws only its rows. On one device the original
        threefry, which XLA:CPU computes in about half the time: MiniLM-L6's masks at batch
        32, seq 64 take 135 ms instead of 262 (TensorFlow's 37-76 ms), the whole train step
        0.92x the time (2 cores, best of 8 and pairwise median of 12, load 5-8). The masks are
        as random and as reproducible from the seed either way, not the same bits."""
        return jax.threefry_partitionable(self.distribution is not None)

    def put(self, batch: dict) -> dict:
        """A batch of arrays on the devices: split along the rows over several (a scalar such
        as `global_examples` replicated). `batch` holds this process's `share` of the global
        batch's rows (all of them on one process): `device_put` gives each device its rows;
        with several processes `jax.make_array_from_process_local_data` puts this process's
        rows on its devices, the global array made of every process's."""
        arrays = {name: np.asarray(value) for name, value in batch.items()}
        if self.distribution is None:
            return arrays
        if self.share[1] == 1:  # one process
            return {name: jax.device_put(value, self._of(value)) for name, value in arrays.items()}
        return {
            name: jax.make_array_from_process_local_data(self._of(value), value)
            for name, value in arrays.items()
        }

    def shapes(self, batch: dict) -> dict:
        """`jax.ShapeDtypeStruct`s of a batch as `put` places it (ahead-of-time lowering)."""
        if self.distribution is None:
            return batch
        return {
            name: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=self._of(s))
            for name, s in batch.items()
        }

    def _of(self, array) -> jax.sharding.Sharding:
        """Where an array of a batch goes: split along its rows, or a scalar on every device."""
        return self.rows if array.ndim else self.whole


def process_share(devices: list) -> tuple[int, int]:
    """This process's share of a global batch split over `devices` (taken process by
    process): (its position among their processes, how many processes there are).

    Raises:
        ConfigError: the processes have different numbers of devices (their shares would
            differ in shape, and a step's shapes are static).
    """
    counts = collections.Counter(device.process_index for device in devices)
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"process {p}: {n}" for p, n in sorted(counts.items()))
        raise ConfigError(
            f"the JAX processes have different numbers of devices ({listed}): every process "
            "makes an equal share of each batch, so give each the same number of devices"
        )
    processes = sorted(counts)
    return processes.index(jax.process_index()), len(processes)
