"""TensorFlow's start-up for the CLI: kept off the terminal, and set up for speed on a CPU.

Loading TensorFlow prints C++ log lines (oneDNN notes, CUDA probing, and on every CPU-only
machine `E0000 ... failed call to cuInit: ... CUDA error`) that read like failures. The CLI loads
TensorFlow and enumerates its devices with standard error's file descriptor pointed at
/dev/null, and raises TensorFlow's C++ log threshold to fatal-only, which also keeps off the
lines logged later in a run (oneDNN's `E0000 ... oneDNN supports DT_INT64 only on platforms with
AVX-512` on a CPU without it); BERTFIT_VERBOSE_TF=1 keeps all of it. Python exceptions are not
affected: they are raised after the descriptor is restored.

Keras, loaded with TensorFlow, imports scikit-learn (for its estimator wrappers), scipy (sparse
inputs) and matplotlib (image galleries) whenever they are installed, and falls back when they
are not. Training and prediction use none of them; the `demo` extra installs the first two
(sentence-transformers needs them) and `report.html` draws with matplotlib after training: on a
2-core CPU they add ~2 s and ~95 MiB to every command's start (matplotlib ~0.4 s and 17 MiB). The
CLI hides them while TensorFlow loads, then makes them importable again.

Three settings make a CPU faster (measured on a 2-core AMD EPYC with MiniLM-L6; a training step
at batch 32 x 28 tokens, an inference step at 64 x 28):
- TensorFlow's default CPU allocator hands every tensor to the C library's malloc, which gives
  large blocks back to the kernel when they are freed and maps them anew on the next request:
  the tensors of every training step (the dense gradient of a 30k-token embedding table, 45 MiB
  for MiniLM, the optimizer's temporaries, the activations) are page-faulted in again on every
  step. Its pooling (BFC) allocator keeps freed memory for the next step: the clipping and AdamW
  update take 37 ms instead of 80, a training step 7-13% less, a run's peak memory is 50-80 MiB
  lower.
- TensorFlow uses its oneDNN kernels by default only on CPUs with AVX-512's neural-network
  instructions; on the others (every AMD CPU, Intel's without AVX-512) its Eigen kernels, which
  were slower here for every matrix product: a training step 9% less with oneDNN, an inference
  step 17% less (its batched products of attention take a third of Eigen's time).
- Grappler, TensorFlow's graph optimizer, spends 0.7-0.8 s on the training step's first call
  and 0.3 s on the prediction function's. It made neither faster with oneDNN on the AMD CPU,
  and is turned off for training on machines without an accelerator (on a GPU its layout and
  fusion passes stay). On an Intel Xeon with AVX-512 its fusions (MatMul + BiasAdd, the
  element-wise chains) take 14% off a MiniLM forward (64 x 32 tokens: 154 ms, 179 without;
  `bench/inference_profile.py`) and the predictor reads 9% more texts a second: the
  commands that only run a trained model (`start_tensorflow(for_inference=True)`) keep it.
The first two are environment variables TensorFlow reads once, when it loads: a user's own
value wins.

A TensorFlow that cannot start (an incompatible libtpu, a missing CUDA library) aborts the
process while loading, and its fatal line would go to /dev/null with the rest: bertfit checks
the installed builds first (`bertfit.tf_build`), keeps the start-up output in a temporary file
instead, and a watcher process forked before loading prints the fatal line and what it means
when the process dies there. An import that fails with an exception (two builds in one folder:
`undefined symbol`) is said as an `InstallError`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import tempfile
import threading

from bertfit.errors import ConfigError
from bertfit.tf_build import InstallError, check_installed, explain_fatal

VERBOSE_VARIABLE = "BERTFIT_VERBOSE_TF"
# Read by TensorFlow once, when it loads (see above).
CPU_SPEED_SETTINGS = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_ENABLE_ONEDNN_OPTS": "1"}


def verbose() -> bool:
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


def quiet_native_logs_by_default() -> None:
    """Raises TensorFlow's C++ log threshold to fatal-only where neither the user
    (TF_CPP_MIN_LOG_LEVEL) nor BERTFIT_VERBOSE_TF says otherwise. TensorFlow reads it once, when
    it loads: `import bertfit` calls this, so the TensorFlow its Python API loads logs none of
    the notes at ERROR level (`failed call to cuInit` on a machine without a GPU, oneDNN's
    DT_INT64 note below); `start_tensorflow` too. Lines TensorFlow's CPU build prints before
    its logging is set up (`Could not find cuda drivers`) ignore the threshold: only the CLI's
    silenced descriptor keeps those off."""
    if not verbose():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@contextlib.contextmanager
def start_output_kept():
    """Points file descriptor 2 at a temporary file for the block, and yields that file. If
    the process dies in the block (TensorFlow aborts while loading), a watcher forked first
    prints the output's fatal line to the real standard error. The watcher is forked only in
    a process of one thread (the CLI's): forking beside other threads can deadlock."""
    sys.stderr.flush()
    output = tempfile.TemporaryFile()
    saved = os.dup(2)
    watcher = _fork_watcher(output, saved) if threading.active_count() == 1 else None
    os.dup2(output.fileno(), 2)
    try:
        yield output
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if watcher is not None:
            pid, alive = watcher
            os.write(alive, b"1")  # the block ended with this process alive: nothing to say
            os.close(alive)
            os.waitpid(pid, 0)
        output.close()


def _fork_watcher(output, stderr_fd: int) -> tuple[int, int]:
    """A child that waits on a pipe: one byte means the parent got through; end of file
    without it means the parent died, and the child prints what it had written to `output`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(read_end)
        return pid, write_end
    try:  # the watcher
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent to answer
        os.close(write_end)
        if not os.read(read_end, 1):
            os.lseek(output.fileno(), 0, os.SEEK_SET)
            text = os.read(output.fileno(), 1 << 20).decode("utf-8", "replace")
            os.write(stderr_fd, _died_while_loading(text).encode())
    finally:
        os._exit(0)


def _died_while_loading(text: str) -> str:
    return (
        f"bertfit: TensorFlow stopped the process while loading:\n{explain_fatal(text)}\n"
        f"bertfit: {VERBOSE_VARIABLE}=1 shows all of TensorFlow's start-up output.\n"
    )


@contextlib.contextmanager
def stderr_silenced():
    """Points file descriptor 2 at /dev/null for the block (C++ writes included)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def native_logs_quiet():
    """`stderr_silenced()`, unless BERTFIT_VERBOSE_TF is set: for native code that logs while
    it loads (an op library re-prints TensorFlow's buffered start-up lines when it initialises
    its logging; SentencePiece notes "precompiled_charsmap is empty" for every model)."""
    return contextlib.nullcontext() if verbose() else stderr_silenced()


# Keras' optional imports that nothing needs while TensorFlow loads (see above).
UNUSED_OPTIONAL_MODULES = ("sklearn", "scipy", "matplotlib")


@contextlib.contextmanager
def modules_hidden(names: tuple[str, ...]):
    """`import name` raises ImportError in the block for each name not imported yet; after
    it, those modules import normally."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # the import system's "not available" marker
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def use_cpu_speed_settings() -> None:
    """Puts `CPU_SPEED_SETTINGS` in the environment where it has no value of its own; they take
    effect when TensorFlow loads (later in this process, or in its children)."""
    for name, value in CPU_SPEED_SETTINGS.items():
        os.environ.setdefault(name, value)


def start_tensorflow(for_inference: bool = False) -> None:
    """Imports TensorFlow and initialises its devices, set up for speed on a CPU (see above),
    without Keras' unused optional imports and, unless BERTFIT_VERBOSE_TF is set, without
    their log lines. Once TensorFlow is loaded, only the Grappler setting still applies:
    off on a CPU-only machine unless `for_inference` (a process that only runs a trained
    model)."""
    if "tensorflow" not in sys.modules:
        check_installed()
    use_cpu_speed_settings()
    # The silenced descriptor covers loading only; the threshold (read when TensorFlow loads;
    # a user's own value wins) also covers the C++ lines logged later, mid-run. One is on every
    # x86 CPU without AVX-512, where oneDNN is on (above): at the first int64 op oneDNN cannot
    # take, TensorFlow logs once `E0000 ... util.cc:131] oneDNN supports DT_INT64 only on
    # platforms with AVX-512. Falling back to the default Eigen-based implementation if
    # present.` (a note, at ERROR level: 3 is FATAL only).
    quiet_native_logs_by_default()
    quiet = contextlib.nullcontext(None) if verbose() else start_output_kept()
    hidden = UNUSED_OPTIONAL_MODULES
    if os.environ.get("KERAS_BACKEND") == "jax":  # JAX needs scipy (jax.scipy), Keras loads it
        hidden = tuple(name for name in hidden if name != "scipy")
    with modules_hidden(hidden), quiet as output:
        try:
            import tensorflow as tf
        except ImportError as e:
            raise InstallError(_import_failed(e, output)) from None

        devices = tf.config.list_physical_devices()  # probes CUDA now, while silenced
    cpu_only = all(device.device_type == "CPU" for device in devices)
    tf.config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": cpu_only and not for_inference}
    )


def _import_failed(error: ImportError, output) -> str:
    text = str(error)
    if output is not None:
        output.seek(0)
        text = output.read().decode("utf-8", "replace") + "\n" + text
    return f"TensorFlow could not be imported: {explain_fatal(text)}"


def select_keras_backend(name: str) -> None:
    """Makes `name` ("tensorflow" or "jax", `--backend`) the Keras backend of this process and
    of the processes it starts. Keras reads KERAS_BACKEND once, when it is imported (and
    `start_tensorflow` imports it), so this runs first; a process whose Keras already runs
    another backend is refused.

    Raises:
        InstallError: `jax` without JAX installed, with the command that installs it.
        ConfigError: Keras was imported already, on another backend.
    """
    if "keras" in sys.modules:
        running = sys.modules["keras"].backend.backend()
        if running != name:
            raise ConfigError(
                f"this process imported Keras on its {running} backend already, and this "
                f"command runs on {name}: set KERAS_BACKEND={name} before Keras is imported "
                "(the bertfit command sets it)."
            )
    elif name == "jax" and importlib.util.find_spec("jax") is None:
        raise InstallError(
            "--backend jax needs JAX, which is not installed here: pip install 'bertfit[jax]' "
            "(CPU), or jax[cuda12] on an NVIDIA GPU, jax[tpu] on a TPU VM (docs/install.md, JAX)."
        )
    os.environ["KERAS_BACKEND"] = name
