"""`bertfit train`, killed with SIGKILL at a chosen point: the crash a resumed run must survive.

    python -m tests.training.killed_train POINT N TRAIN-ARGS...

POINT is where the N-th time the process gets there it kills itself:
- `steps`: after writing the step lines of a host call (between steps, mid-epoch);
- `checkpoint`: inside a checkpoint write, once its temporary file is written and before it is
  renamed into place (leaves `.ckpt-N.safetensors.<pid>.tmp` behind);
- `eval`: as an evaluation starts;
- `epoch-end`: after metrics.json was written (the first write is the run's start).
"""

from __future__ import annotations

import os
import signal
import sys


def kill_on_call(owner, name: str, n: int, after: bool) -> None:
    original = getattr(owner, name)
    calls = 0

    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == n and not after:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if calls == n and after:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, wrapper)


def main() -> int:
    point, n, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    from bertfit.cli import main as cli
    from bertfit.runs import checkpoint_files
    from bertfit.training.loop import Trainer
    from bertfit.training.run_dir import TrainingRunDir

    owner, name, after = {
        "steps": (TrainingRunDir, "append_steps", True),
        "checkpoint": (checkpoint_files, "_write", True),
        "eval": (Trainer, "predict", False),
        "epoch-end": (TrainingRunDir, "save_metrics", True),
    }[point]
    kill_on_call(owner, name, n, after)
    return cli(["train", *args])


if __name__ == "__main__":
    sys.exit(main())
