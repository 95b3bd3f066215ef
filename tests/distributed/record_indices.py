"""`bertfit ARGS...` that also saves, under DIR, the example indices each input pipeline of this
process feeds (one .npy file per pipeline and bucket): the multi-worker test counts them.

    python -m tests.distributed.record_indices DIR ARGS...
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path


def record_fed_indices(directory: Path) -> None:
    """Wraps `BucketedInput._rows_for`, which makes the index rows of one input pipeline."""
    import numpy as np

    from bertfit.data.pipeline import BucketedInput
    from bertfit.model.inputs import INDEX

    rows_for, calls = BucketedInput._rows_for, itertools.count()

    def recording(self, seq_length, context):
        rows = rows_for(self, seq_length, context)
        name = f"{os.getpid()}-{next(calls)}-len{seq_length}-pipeline{context.input_pipeline_id}"
        np.save(directory / f"{name}.npy", rows[INDEX])
        return rows

    BucketedInput._rows_for = recording


def main() -> int:
    directory, args = Path(sys.argv[1]), sys.argv[2:]
    from bertfit.cli import main as cli

    record_fed_indices(directory)
    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
