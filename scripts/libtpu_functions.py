"""Counts the functions a tensorflow-tpu wheel's TPU support calls that a libtpu wheel lacks.

TensorFlow's TPU build loads libtpu.so and looks up every function named in its
`tpu_*_init_fns.inc` (`TFTPU_SET_FN(api, Name)`); one missing aborts `import tensorflow` with
`Name not available in this library`. This reads both wheels (zip files) and `nm -D`'s list of
libtpu's exported symbols, so a libtpu can be judged without a TPU and without installing it.
It is how bertfit's libtpu pin was chosen (pyproject.toml's `tpu` extra; bertfit.tf_build):

    pip download --no-deps -d wheels tensorflow-tpu==2.20.0 libtpu==0.0.21 libtpu==0.0.46
    python scripts/libtpu_functions.py wheels/tensorflow_tpu-*.whl wheels/libtpu-*.whl

printed `0.0.21: 212 of 212` and `0.0.46: 70 of 212` (0.0.17, 0.0.30 and 0.0.31: 212 of 212).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def functions_called(tensorflow_wheel: str) -> set[str]:
    with zipfile.ZipFile(tensorflow_wheel) as wheel:
        text = "".join(
            wheel.read(name).decode()
            for name in wheel.namelist()
            if re.search(r"include/xla/stream_executor/tpu/tpu_\w+_init_fns\.inc$", name)
        )
    return set(re.findall(r"TFTPU_SET_FN\(\w+,\s*(\w+)", text))


def functions_exported(libtpu_wheel: str) -> set[str]:
    with zipfile.ZipFile(libtpu_wheel) as wheel, tempfile.TemporaryDirectory() as tmp:
        library = wheel.extract("libtpu/libtpu.so", tmp)
        symbols = subprocess.run(
            ["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True
        ).stdout
    return {line.split()[-1].split("@")[0] for line in symbols.splitlines() if line.strip()}


def main(tensorflow_wheel: str, *libtpu_wheels: str) -> None:
    called = functions_called(tensorflow_wheel)
    for wheel in libtpu_wheels:
        version = Path(wheel).name.split("-")[1]
        missing = called - functions_exported(wheel)
        print(f"{version}: {len(called) - len(missing)} of {len(called)}")
        for name in sorted(missing)[:5]:
            print(f"  missing {name}")


if __name__ == "__main__":
    main(*sys.argv[1:])
