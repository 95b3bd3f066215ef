"""The XLA flags the tests compile with (`conftest.py` sets them for every test process)."""

from __future__ import annotations

import os

# The tests pin what XLA's programs compute, not how fast they run: they compile with LLVM's
# optimisations and XLA's CPU fusion emitters off (the same operations, plainer machine code,
# 3-4x faster to compile; a third of the suite's CPU time). Every process the tests start
# inherits it. The benches (bench/) and users' runs compile with XLA's defaults.
QUICK_XLA = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
    "--xla_cpu_use_fusion_emitters=false"
)


def without_quick_xla(flags: str) -> str:
    """`flags` as a user's process has them: for a test that measures the compiled program
    itself (its memory), not only what it computes."""
    return flags.replace(QUICK_XLA, "").strip()


def use_quick_xla() -> None:
    os.environ["XLA_FLAGS"] = f"{QUICK_XLA} {os.environ.get('XLA_FLAGS', '')}".strip()
