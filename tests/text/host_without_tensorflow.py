"""The child process of `test_host_tokenizer.py`'s TensorFlow-free test: run under
`tests.without_tensorflow`, it loads the host tokenizer of each folder in argv, tokenizes, packs
pairs and cuts windows, and prints one JSON line of what it made (`report`, which the test
compares with the same in its own process) and of the TensorFlow modules loaded (none may be)."""

from __future__ import annotations

import json
import sys

from bertfit.text.host import load_host_tokenizer
from bertfit.text.lengths import WindowSpec

SPEC = WindowSpec(max_seq_length=12, stride=3, max_chunks=3)
TEXTS = ["a good film", "  NAÏVE café [MASK] <mask> </s>", "x" * 40, "", "dull " * 30]


def report(folder) -> dict:
    """What the host tokenizer of `folder` makes of `TEXTS`, as JSON values."""
    tokenizer = load_host_tokenizer(folder)
    packed = tokenizer(TEXTS, TEXTS[::-1], max_seq_length=8)
    windows = tokenizer.windows(TEXTS, SPEC)
    return {
        "ids": tokenizer.tokenize(TEXTS),
        "input_word_ids": packed["input_word_ids"].tolist(),
        "window_mask": windows["window_mask"].tolist(),
        "input_word_ids_windows": windows["input_word_ids"].tolist(),
    }


if __name__ == "__main__":
    folders = [report(folder) for folder in sys.argv[1:]]
    imported = {name.split(".")[0] for name, module in sys.modules.items() if module}
    loaded = sorted(imported & {"tensorflow", "tensorflow_text", "torch", "transformers"})
    print(json.dumps({"folders": folders, "loaded": loaded}))
