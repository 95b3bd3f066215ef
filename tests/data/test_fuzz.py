"""Fuzzing the readers: any bytes in, only BertfitError out, and every accepted row kept.

Hypothesis generates CSV, TSV and JSONL files three ways: well-formed rows of awkward Unicode
(lone surrogates, controls, zero-width and combining characters, line separators, special
tokens) with labels of every JSON type (huge numbers, NaN, nested lists), the same files with
bytes flipped or cut, and raw bytes. Each goes through the reader, then the task inference,
and every text accepted goes through the in-graph tokenizer at the end. 10,200 files in all.

The same for the other things a user hands bertfit: run configs (YAML documents of random
shape, mutated and raw bytes) load or raise a BertfitError, and output paths (devices, FIFOs,
folders, missing parents, a run's files, symlinks to each) are accepted and written, or refused
with a BertfitError leaving everything as it was.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import stat
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfit.config import TASKS, RunConfig
from bertfit.data.sources import SourceSpec, parse_examples
from bertfit.data.tasks import infer_task
from bertfit.errors import BertfitError

EXAMPLES_PER_FORMAT = 3400

# Hypothesis draws one seed per file and the file is built from a Random with that seed:
# generating with Hypothesis' own strategies cost ~20 ms a file, far past the test-time budget.
POOL = list("abc XYZ,;\"'\t\n\r|\\{}[]:0123456789.-+eE#") + [
    "\ud800",
    "\udfff",
    "\u200b",
    "\u200d",
    "\x00",
    "\x1e",
    "\x85",
    "\u2028",
    "\u00e9",
    "e\u0301",
    "\u4e2d",
    "\ufeff",
    "\U0001f600",
    "[SEP]",
    "[CLS]",
]
SPECIAL_LABELS = [
    "",
    " ",
    "\u200b",
    "pos",
    "neg",
    "1",
    "01",
    "2.5",
    "nan",
    "inf",
    "a|b",
    "9" * 4400,
    10**40,
    1e308,
    -1e308,
    float("nan"),
    True,
    None,
    [],
    [[1, [2]]],
]


def random_text(r) -> str:
    return "".join(r.choice(POOL) for _ in range(r.randrange(0, 14)))


def random_label(r):
    kind = r.randrange(6)
    if kind == 0:
        return r.choice(SPECIAL_LABELS)
    if kind == 1:
        return r.choice([r.randrange(-3, 4), r.uniform(-1e3, 1e3), r.random() < 0.5])
    if kind == 2:
        return [r.choice(["pos", "neg", "fun", random_text(r)]) for _ in range(r.randrange(4))]
    return random_text(r)


def random_rows(r) -> list[tuple[str, object]]:
    return [(random_text(r), random_label(r)) for _ in range(r.randrange(0, 7))]


def _delimited(rows, delimiter: str) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(["text", "label"])
    for text, label in rows:
        writer.writerow([text, label if isinstance(label, str) else json.dumps(label)])
    return buffer.getvalue().encode("utf-8", "surrogatepass")


def _jsonl(rows, ascii_only: bool) -> bytes:
    lines = [
        json.dumps({"text": text, "label": label}, ensure_ascii=ascii_only) for text, label in rows
    ]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def random_file(seed: int, fmt: str) -> bytes:
    r = random.Random(seed)
    kind = r.choice(["rows", "rows", "mutated", "bytes"])
    if kind == "bytes":
        return r.randbytes(r.randrange(300))
    table = random_rows(r)
    data = (
        _jsonl(table, r.random() < 0.5)
        if fmt == "jsonl"
        else _delimited(table, "\t" if fmt == "tsv" else ",")
    )
    if kind == "mutated" and data:
        data = bytearray(data)
        for _ in range(r.randrange(1, 5)):
            data[r.randrange(len(data))] = r.randrange(256)
        data = bytes(data[: r.randrange(len(data) + 1)])
    return data


@st.composite
def files(draw, fmt: str) -> bytes:
    return random_file(draw(st.integers(0, 2**64)), fmt)


def independent_count(data: bytes, fmt: str) -> int:
    """Rows in an accepted file, counted without bertfit's reader."""
    text = data.decode("utf-8-sig")
    if fmt == "jsonl":
        return sum(1 for line in text.split("\n") if line.strip())
    if fmt == "tsv":  # one record per line; only \r\n, \r and \n end a line
        return len(text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")) - 1
    records = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    while records and not records[-1]:
        records.pop()
    return len(records) - 1


def fuzz(fmt: str, data: bytes) -> None:
    try:
        examples = parse_examples(data, f"fuzz.{fmt}", fmt)
    except BertfitError:
        return
    assert len(examples) == independent_count(data, fmt)
    try:
        infer_task(examples, f"fuzz.{fmt}")
    except BertfitError:
        pass
    # as a run reads its files: empty labels allowed, the task (each one) decides
    try:
        examples = parse_examples(data, f"fuzz.{fmt}", fmt, SourceSpec(empty_labels=True))
    except BertfitError:
        return
    for kind in (None, *TASKS):
        try:
            task, _ = infer_task(examples, f"fuzz.{fmt}", kind=kind)
            task.targets(examples, f"fuzz.{fmt}")
        except BertfitError:
            pass


SETTINGS = settings(
    max_examples=EXAMPLES_PER_FORMAT,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_readers_raise_only_bertfit_errors_and_keep_every_row(fmt):
    SETTINGS(given(files(fmt))(lambda data: fuzz(fmt, data)))()


def test_every_accepted_text_tokenizes_to_at_least_one_id(tiny_hf_dir):
    from bertfit import load_encoder

    # The texts of files built as the fuzz tests above build theirs, from fixed seeds: this test
    # makes its own, whichever tests ran before it.
    accepted = []
    for fmt in ("csv", "tsv", "jsonl"):
        for seed in range(EXAMPLES_PER_FORMAT):
            try:
                examples = parse_examples(random_file(seed, fmt), f"fuzz.{fmt}", fmt)
            except BertfitError:
                continue
            accepted.extend(e.text for e in examples)
    assert len(accepted) > 1000
    _, tokenizer = load_encoder(tiny_hf_dir[0])
    for start in range(0, len(accepted), 4096):
        ids = tokenizer.tokenize(accepted[start : start + 4096])
        assert int(ids.row_lengths().numpy().min()) >= 1


# ---- run configs ----

CONFIG_EXAMPLES, PATH_EXAMPLES = 400, 300

CONFIG_KEYS = [
    "output_dir",
    "model",
    "data",
    "train",
    "name",
    "max_seq_length",
    "buckets",
    "batch_size",
    "learning_rate",
    "seed",
    "epochs",
    "task",
    "precision",
    "x",
    "",
]
CONFIG_VALUES = [
    None,
    True,
    0,
    -1,
    2**64,
    1e308,
    float("nan"),
    "",
    "64",
    "fp32",
    "minilm-l6",
    [],
    [0],
    [16, 999],
    {},
    "\ud800",
]


def random_yaml_value(r, depth: int = 0):
    roll = r.random()
    if depth < 4 and roll < 0.3:
        return {
            r.choice(CONFIG_KEYS): random_yaml_value(r, depth + 1) for _ in range(r.randrange(4))
        }
    if depth < 4 and roll < 0.4:
        return [random_yaml_value(r, depth + 1) for _ in range(r.randrange(3))]
    return r.choice(CONFIG_VALUES)


@st.composite
def config_files(draw) -> bytes:
    r = random.Random(draw(st.integers(0, 2**64)))
    kind = r.choices(["shaped", "mutated", "bytes", "deep"], [8, 4, 2, 1])[0]
    if kind == "bytes":
        return r.randbytes(r.randrange(200))
    if kind == "deep":
        opening, closing = r.choice([("[", "]"), ("{a: ", "}"), ("- ", "")])
        n = r.choice([10, 200, 1200])  # past Python's recursion limit: the parser's own
        return ("model: " + opening * n + "1" + closing * n + "\n").encode()
    document = (
        random_yaml_value(r)
        if r.random() < 0.3
        else {
            section: random_yaml_value(r, 1)
            for section in r.sample(CONFIG_KEYS[:4], r.randrange(5))
        }
    )
    data = yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass")
    if kind == "mutated" and data:
        data = bytearray(data)
        for _ in range(r.randrange(1, 4)):
            data[r.randrange(len(data))] = r.randrange(256)
        data = bytes(data)
    return data


def test_run_configs_load_or_raise_only_bertfit_errors(tmp_path):
    path = tmp_path / "run.yaml"

    def load(data: bytes) -> None:
        path.write_bytes(data)
        try:
            RunConfig.load(path).validate()
        except BertfitError:
            pass

    settings(
        max_examples=600, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )(given(config_files())(load))()


# ---- output paths ----


def test_output_paths_are_written_or_refused_leaving_everything_as_it_was(tmp_path):
    from bertfit.paths import check_output_dir, check_output_file, write_output

    root = tmp_path / "place"
    root.mkdir()
    (root / "file.txt").write_text("keep")
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")
    (root / "run").mkdir()
    (root / "run" / "config.yaml").write_text("keep")
    for name, target in [
        ("to-null", "/dev/null"),
        ("to-fifo", root / "fifo"),
        ("to-file", root / "file.txt"),
        ("to-run", root / "run"),
    ]:
        (root / name).symlink_to(target)
    parts = [
        "file.txt",
        "folder",
        "fifo",
        "run",
        "config.yaml",
        "report.html",
        "missing",
        "-",
        "to-null",
        "to-fifo",
        "to-file",
        "to-run",
        "..",
        ".",
        "new.csv",
    ]
    bases = [str(root), "/dev", "/proc", "/dev/null", "-"]

    def before() -> dict:
        return {
            "null": stat.S_ISCHR(os.stat("/dev/null").st_mode),
            "fifo": stat.S_ISFIFO(os.stat(root / "fifo").st_mode),
            "file": (root / "file.txt").read_text(),
            "config": (root / "run" / "config.yaml").read_text(),
            "run": sorted(p.name for p in (root / "run").iterdir()),
        }

    original = before()

    @given(st.integers(0, 2**64))
    @settings(
        max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def one(seed: int) -> None:
        r = random.Random(seed)
        path = "/".join([r.choice(bases), *(r.choice(parts) for _ in range(r.randrange(3)))])
        if r.random() < 0.1:
            path = "-"
        try:
            check_output_file(
                path,
                "--output",
                inputs=[root / "file.txt"],
                run_dir=root / "run",
                allowed_in_run=["report.html"],
            )
        except BertfitError:
            pass
        else:
            if path != "-":
                write_output(path, "written")
                assert Path(path).read_text() == "written"
                Path(path).unlink()
        try:
            check_output_dir(path, "OUT", inputs=[root / "file.txt"], run_dir=root / "run")
        except BertfitError:
            pass
        assert before() == original, path

    one()


# ---- tokenizer files ----

TOKENIZER_EXAMPLES = 60
TOKENIZER_TEXTS = ["a good film", "", "e\u0301 \u4e2d [CLS] <s> \x00 \ufffd", "x" * 300]
JSON_VALUES = [None, True, 0, -1, 2**40, 1.5, float("nan"), "", "[UNK]", "<s>", "Unigram", "BPE",
               "WordPiece", "Sequence", [], {}, [["a", -1.0]], {"type": "Metaspace"}]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer_folders(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Valid tokenizer folders of every layout load_tokenizer reads, as file name → bytes:
    tokenizer.json of each model type, vocab.txt, vocab.json + merges.txt, and an ALBERT
    spiece.model (with sentencepiece's nmt_nfkc charsmap), made by the real libraries."""
    pytest.importorskip("transformers")
    sentencepiece = pytest.importorskip("sentencepiece")
    from tests.families import train_tokenizer

    words, accents = "good bad dull great long short".split(), "é ü ß 中 x y".split()
    texts = [f"the {words[i % 6]} film was {accents[i % 5]} and fun {i}" for i in range(120)]
    folder = tmp_path_factory.mktemp("tokenizers")
    layouts: dict[str, dict[str, bytes]] = {}
    for kind, style in [("wordpiece", "[CLS]"), ("unigram", "<s>"), ("bpe", "<s>")]:
        train_tokenizer(kind, texts, vocab_size=120, style=style).save_pretrained(folder / kind)
        layouts[kind] = {p.name: p.read_bytes() for p in (folder / kind).iterdir()}
    wordpiece = train_tokenizer("wordpiece", texts, vocab_size=120)
    wordpiece.backend_tokenizer.model.save(str(folder))  # vocab.txt
    layouts["vocab.txt"] = {"vocab.txt": (folder / "vocab.txt").read_bytes()}
    bpe = train_tokenizer("bpe", texts, vocab_size=300, style="<s>")
    bpe.backend_tokenizer.model.save(str(folder))  # vocab.json + merges.txt
    layouts["vocab.json"] = {n: (folder / n).read_bytes() for n in ("vocab.json", "merges.txt")}
    (folder / "corpus.txt").write_text("\n".join(texts), "utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"), model_prefix=str(folder / "m"), vocab_size=50,
        model_type="unigram", num_threads=1, minloglevel=2, pad_id=0, unk_id=1, bos_id=-1,
        eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
    )  # fmt: skip
    layouts["spiece.model"] = {
        "spiece.model": (folder / "m.model").read_bytes(),
        "config.json": b'{"model_type": "albert"}',
    }
    return layouts


def mutate_json(r, value, depth: int = 0):
    """`value` with one random change somewhere inside: a value replaced, a key dropped, a
    list entry repeated or dropped."""
    if isinstance(value, dict) and value and depth < 6 and r.random() < 0.8:
        key = r.choice(list(value))
        roll = r.random()
        if roll < 0.15:
            return {k: v for k, v in value.items() if k != key}
        if roll < 0.3:
            return {**value, key: r.choice(JSON_VALUES)}
        return {**value, key: mutate_json(r, value[key], depth + 1)}
    if isinstance(value, list) and value and depth < 6 and r.random() < 0.8:
        i = r.randrange(len(value))
        roll = r.random()
        if roll < 0.2:
            return value[:i] + value[i + 1 :]
        if roll < 0.4:
            return value[:i] + [value[i]] + value[i:]  # a piece, token or merge twice
        return value[:i] + [mutate_json(r, value[i], depth + 1)] + value[i + 1 :]
    return r.choice(JSON_VALUES)


def mutate_file(r, name: str, data: bytes) -> bytes:
    kind = r.choice(["structure", "structure", "bytes", "cut", "random"])
    if kind == "structure" and name.endswith(".json"):
        return json.dumps(mutate_json(r, json.loads(data)), ensure_ascii=False).encode()
    if kind == "structure":  # line files: a line dropped, repeated or garbled
        lines = data.split(b"\n")
        i = r.randrange(len(lines))
        lines[i : i + 1] = r.choice([[], [lines[i]] * 2, [b"a b c"], [b""], [r.randbytes(5)]])
        return b"\n".join(lines)
    if kind == "random":
        return r.randbytes(r.randrange(200))
    data = bytearray(data)
    if kind == "bytes" and data:
        for _ in range(r.randrange(1, 6)):
            data[r.randrange(len(data))] = r.randrange(256)
    return bytes(data[: r.randrange(len(data) + 1)] if kind == "cut" else data)


@pytest.mark.slow  # ~15 s: 60 tokenizers built and traced
def test_tokenizer_files_load_and_tokenize_or_raise_only_bertfit_errors(
    tokenizer_folders, tmp_path
):
    """Damaged tokenizer files of every layout: load_tokenizer (and the host tokenizer,
    load_host_tokenizer) refuses them with a BertfitError, or the tokenizer it builds
    tokenizes and packs any text."""
    from bertfit.text.host import load_host_tokenizer
    from bertfit.text.loading import load_tokenizer

    def one(seed: int) -> None:
        r = random.Random(seed)
        layout = tokenizer_folders[r.choice(sorted(tokenizer_folders))]
        folder = Path(tempfile.mkdtemp(dir=tmp_path))
        for name, data in layout.items():
            changed = r.random() < 0.7 or name in ("spiece.model", "vocab.txt")
            (folder / name).write_bytes(mutate_file(r, name, data) if changed else data)
        for load in (load_host_tokenizer, load_tokenizer):
            try:
                tokenizer = load(folder)
            except BertfitError:
                continue
            try:
                tokenizer.tokenize(TOKENIZER_TEXTS)
                tokenizer(TOKENIZER_TEXTS, TOKENIZER_TEXTS[::-1], max_seq_length=16)
            except BertfitError:
                pass

    settings(
        max_examples=TOKENIZER_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )(given(st.integers(0, 2**64))(one))()
