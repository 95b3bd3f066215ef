"""One JAX process of a multi-host rehearsal (`tests.jax_process.run_in_jax_processes` starts
them on localhost): it joins the others, makes its share of each global batch of a tiny plan
(`DeviceSplit.share`), puts it on its devices (`DeviceSplit.put`), and prints as JSON its share,
whether its rows were its part of the one-process batch, and whether the global batch the
processes' parts made is the one-process batch.

    python -m tests.training.jax_hosts DIR   # DIR: vocab.txt and rows.json, [[text, label]]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from jax.experimental import multihost_utils

from bertfit.data.host_input import HostInput
from bertfit.data.pipeline import INDEX, encode_texts, plan_batches
from bertfit.jax_devices import DeviceSplit
from bertfit.text.host import load_host_tokenizer
from bertfit.training.jax_processes import join_jax_processes


def main(directory: str) -> None:
    join_jax_processes()  # before anything runs on JAX
    rows = json.loads((Path(directory) / "rows.json").read_text())
    tokenizer = load_host_tokenizer(directory)
    encoded = encode_texts(tokenizer, [text for text, _ in rows])
    labels = np.array([label == "pos" for _, label in rows], np.int32)
    plan = plan_batches(encoded.packed_lengths, [8, 32], 8, shuffle=True, seed=2)
    data = HostInput(encoded, labels, plan, special_ids=tokenizer.special_ids)

    split = DeviceSplit()
    part, parts = split.share
    mine, whole = data.iterators(split.share), data.iterators()
    own_rows, assembled = [], []
    for step in plan:
        local, batch = next(mine[step.seq_length]), next(whole[step.seq_length])
        own_rows.append(all(_same(local[k], _part(v, part, parts)) for k, v in batch.items()))
        put = split.put({k: v for k, v in local.items() if k != INDEX})  # as a train step
        gathered = multihost_utils.process_allgather(put, tiled=True)
        assembled.append(all(_same(gathered[k], batch[k]) for k in gathered))
    print(
        json.dumps(
            {
                "share": [part, parts],
                "steps": len(plan),
                "own_rows": all(own_rows),
                "assembled": all(assembled),
            }
        )
    )


def _part(value, part: int, parts: int):
    """The `part`-th of `parts` equal parts of a batch's rows (a scalar is every part's)."""
    return value if np.ndim(value) == 0 else np.split(value, parts)[part]


def _same(got, expected) -> bool:
    got = np.asarray(got)
    return got.dtype == np.asarray(expected).dtype and np.array_equal(got, expected)


if __name__ == "__main__":
    main(sys.argv[1])
