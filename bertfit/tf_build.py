"""Which TensorFlow build is installed, what it can reach, and what to install instead.

TensorFlow comes as several distributions that all install the same `tensorflow/` folder:
`tensorflow` (CPU, and GPUs with CUDA), `tensorflow-tpu` (TPUs, through the `libtpu` package)
and `tensorflow-cpu`. pip treats them as unrelated: installing one over another exits 0 and
leaves a folder of two builds that fails on import with an undefined symbol. Two pitfalls of the
TPU build are checked before it loads, from the packages' metadata alone (milliseconds):
- its `libtpu~=0.0.14` requirement takes the newest libtpu, and libtpu 0.0.46 and later lack
  142 of the 212 functions TensorFlow's TPU support calls: `import tensorflow` aborts (exit 134) on
  `ConfigureDistributedTpuOp_DoWork not available in this library`;
- off a TPU host it asks the cloud metadata server for the TPU's topology, 30 tries per value:
  `import tensorflow` takes 8 minutes. bertfit turns its TPU library off where no TPU is
  attached (`TPU_LIBRARY_PATH`), as TensorFlow itself does when it finds none: "This is
  expected if TPU is not used".

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import importlib.util
import os
import re

from bertfit.errors import BertfitError, MissingDependencyError

# The distributions that each install a whole `tensorflow/` folder (not tensorflow-intel or
# tensorflow-macos, which `tensorflow` itself requires on Windows and older macOS).
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-nightly")
TPU_DISTRIBUTION = "tensorflow-tpu"
# The libtpu releases that have every function tensorflow-tpu 2.20's TPU support calls
# (scripts/libtpu_functions.py counts them: 0.0.14-0.0.31 have all 212, 0.0.46 lacks 142).
LIBTPU_WORKS = ((0, 0, 14), (0, 0, 31))
LIBTPU_PIN = "0.0.21"  # pyproject's `tpu` extra

# What to install, per accelerator: README's install table is these commands (a test holds
# them together).
INSTALL = {
    "cpu": ["pip install 'bertfit[cpu]'"],
    "gpu": ["pip install 'bertfit[gpu]'"],
    "tpu": [
        "pip install 'bertfit[tpu]'",
        "pip install --no-deps 'tensorflow-text==2.20.*'",
    ],
}


class InstallError(BertfitError):
    """The installed TensorFlow cannot run bertfit, or not on the hardware asked for."""


def install_commands(accelerator: str) -> str:
    return " && ".join(INSTALL[accelerator])


@dataclasses.dataclass(frozen=True)
class Installed:
    """The TensorFlow distributions in this environment (name → version), and libtpu's."""

    tensorflow: dict[str, str]
    libtpu: str | None

    @classmethod
    def here(cls) -> Installed:
        return cls(
            {name: v for name in TENSORFLOW_DISTRIBUTIONS if (v := _version(name))},
            _version("libtpu"),
        )

    @property
    def tpu_build(self) -> bool:
        return TPU_DISTRIBUTION in self.tensorflow

    def builds(self) -> str:
        return ", ".join(f"{name} {version}" for name, version in self.tensorflow.items())

    def describe(self) -> str:
        return self.builds() + (f", libtpu {self.libtpu}" if self.libtpu else "")

    def problems(self) -> str | None:
        """Why this TensorFlow cannot load, or None."""
        if not self.tensorflow:
            return (
                "TensorFlow is not installed: bertfit runs on it. Install it for your hardware: "
                + "; ".join(f"{k}: {install_commands(k)}" for k in INSTALL)
            )
        if len(self.tensorflow) > 1:
            return (
                f"{self.builds()} are installed over each other in one `tensorflow/` folder, "
                "which then fails to load. Uninstall them all (pip uninstall "
                f"{' '.join(self.tensorflow)}) and install one: on a TPU host "
                f"`{install_commands('tpu')}`, elsewhere `{install_commands('cpu')}`."
            )
        if self.tpu_build and self.libtpu and not _libtpu_works(self.libtpu):
            low, high = (".".join(map(str, v)) for v in LIBTPU_WORKS)
            return (
                f"libtpu {self.libtpu} lacks functions that {self.builds()} "
                f"calls (TensorFlow aborts on import: `... not available in this library`); "
                f"libtpu {low} to {high} have them all. Install the one bertfit pins: "
                f"pip install 'libtpu=={LIBTPU_PIN}'"
            )
        return None


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _libtpu_works(version: str) -> bool:
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    return LIBTPU_WORKS[0] <= numbers <= LIBTPU_WORKS[1]


def tpu_attached() -> bool:
    """A TPU VM shows /dev/accel* (v2-v4) or /dev/vfio/N (v5e and later); a remote TPU is named
    by TPU_NAME. Probing further would contact cloud metadata servers, which hangs on machines
    outside a cloud."""
    return bool(
        os.environ.get("TPU_NAME") or glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
    )


def check_installed(installed: Installed | None = None) -> Installed:
    """Refuses a TensorFlow that cannot load (see the module's docstring), before it loads;
    on the TPU build with no TPU attached, turns its TPU library off (a user's own
    TPU_LIBRARY_PATH wins).

    Raises:
        InstallError: what is installed, why it cannot work, and the command that fixes it.
    """
    installed = installed or Installed.here()
    problem = installed.problems()
    if problem:
        raise InstallError(problem)
    if installed.tpu_build and not tpu_attached():
        os.environ.setdefault("TPU_LIBRARY_PATH", os.devnull)
    return installed


# A fatal log line: absl's `F0000 00:00:...`, TensorFlow's `2025-... F file:line]`.
FATAL_LINE = re.compile(r"^F\d{4} |\d: F |Check failed|^Fatal")
# What TensorFlow's fatal start-up lines mean for a bertfit user.
FATAL_MEANINGS = (
    (
        "not available in this library",
        "the installed libtpu lacks functions this TensorFlow TPU build calls: pip install "
        f"'libtpu=={LIBTPU_PIN}'",
    ),
    (
        "undefined symbol",
        "two TensorFlow builds are installed over each other: reinstall one (README, Install)",
    ),
    (
        "libcud",
        "a CUDA library is missing or of another version: pip install 'bertfit[gpu]' brings "
        "the ones this TensorFlow was built with",
    ),
    ("illegal instruction", "this CPU lacks instructions this TensorFlow build needs (AVX)"),
)


def explain_fatal(text: str) -> str:
    """The fatal line in TensorFlow's start-up output, and what it means where known."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = next(
        (line for line in lines if FATAL_LINE.search(line)),
        lines[-1] if lines else "no output",
    )
    meaning = next((meaning for needle, meaning in FATAL_MEANINGS if needle in text.lower()), None)
    return fatal + (f"\nbertfit: this means {meaning}" if meaning else "")


def tensorflow_importable() -> bool:
    """Whether this environment has a TensorFlow to import (not whether it loads: see
    `check_installed`). A JAX-only install (`bertfit[jax]` on a TPU VM) has none."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ValueError:  # marked absent in sys.modules
        return False


def require_tensorflow(what: str, note: str) -> None:
    """Refuses `what` in one line where TensorFlow cannot be imported, naming the extra that
    installs it; `note` says what runs without it."""
    if not tensorflow_importable():
        raise MissingDependencyError(
            f"{what} needs TensorFlow, which is not installed here: pip install 'bertfit[cpu]' "
            f"({note})."
        )
