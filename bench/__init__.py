"""The benchmarks behind BENCHMARKS.md (`make bench`, `python -m bench.run`).

Each benchmark measures TensorFlow as the `bertfit` command runs it: the CLI's CPU settings
(`bertfit.tf_startup`) are environment variables TensorFlow reads once, when it loads, so they
are set here, before any benchmark module imports it; the peers' processes ignore them.
"""

from bertfit.tf_startup import use_cpu_speed_settings

use_cpu_speed_settings()
