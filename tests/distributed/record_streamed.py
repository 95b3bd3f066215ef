"""`bertfit ARGS...` that also saves, under DIR, the row indices each input pipeline of this
process feeds from a prepared set (one .npy file per epoch, bucket and pipeline): the
multi-worker streaming test counts them.

    python -m tests.distributed.record_streamed DIR ARGS...
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def record_streamed_rows(directory: Path) -> None:
    """Wraps `StreamedInput.dataset`: the rows of each dataset it makes are read once more
    here, eagerly, and saved (the run then reads them as always)."""
    import numpy as np

    from bertfit.data.streaming import StreamedInput
    from bertfit.model.inputs import INDEX

    dataset = StreamedInput.dataset

    def recording(self, bucket, context):
        made = dataset(self, bucket, context)
        rows = [element[INDEX].numpy() for element in made]
        name = f"{os.getpid()}-epoch{self.epoch}-bucket{bucket}-pipeline{context.input_pipeline_id}"
        np.save(directory / f"{name}.npy", np.concatenate(rows) if rows else np.zeros(0, int))
        return made

    StreamedInput.dataset = recording


def main() -> int:
    directory, args = Path(sys.argv[1]), sys.argv[2:]
    from bertfit.cli import main as cli

    record_streamed_rows(directory)
    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
