"""Two hard sets built from Rotten Tomatoes by documented rules (issue 36): rare multi-label
keyword tags, and a small imbalanced 3-class set.

python -m bench.rare_labels DIR    # writes DIR/rare/{train,dev,test}.csv, DIR/three/..., DIR/rt/...

Both start from bertfit's Rotten Tomatoes splits (`bertfit.data.rotten_tomatoes`: the sha1 split
rule of DATA.md), read in file order. A row's `h` is `int(sha1(text).hexdigest(), 16) // 10` (the
hash without the digit that chose its split), so every choice below is reproducible and none
depends on the labels it makes. No text is changed: the tags are read from the text, and the
model has to learn to read them.

**rare** (multi-label, `label` column `acting|script`, empty for none): a row is tagged
- `acting` when it matches `ACTING` (acting, actor(s), actress(es), performance(s), performer(s),
  cast, played, plays: about 8.8% of RT's train rows), and
- `script` when it matches `SCRIPT` (script(s/ed), screenplay, screenwriter(s), writing,
  written, writer(s), dialogue: about 4.5%).
Train: RT train rows with `h % 7 == 0` (1,423 rows: acting 6.0%, script 4.7%). Dev: RT dev rows
with `h % 2 == 0` (638: 6.7%, 3.8%). Test: every RT test row (1,283: 7.6%, 4.8%).

**three** (single-label, classes `fresh`, `rotten`, `acting`): `acting` when the text matches
`ACTING`, else the row's sentiment. Train: RT train rows with `h % 14 == 1` (disjoint from
rare's train rows), keeping every `fresh` and `acting` row but a `rotten` row only when
`(h // 14) % 5 < 3`: 586 rows, `fresh` 61%, `rotten` 31%, `acting` 8.4%. Dev (1,055 rows) and test
(1,092; `acting` 8.9%): the same rule on RT dev and test rows, without the `h % 14` selection.

**rt** (single-label `fresh` / `rotten`): bertfit's Rotten Tomatoes splits unchanged, the easy
reference: train 10,205 rows (fresh 58%), dev 1,264, test 1,283.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
from pathlib import Path

from bertfit.data.rotten_tomatoes import LABELS, rotten_tomatoes_dir

ACTING = re.compile(
    r"\b(acting|actors?|actress(es)?|performances?|performers?|cast|played|plays)\b", re.I
)
SCRIPT = re.compile(
    r"\b(script(s|ed)?|screenplay|screenwriters?|writing|written|writers?|dialogue)\b", re.I
)


def _h(text: str) -> int:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) // 10


def tags(text: str) -> str:
    """The `|`-joined tags of one text ("" for none).

    Examples:
    >>> tags("The cast is fine but the script is a mess.")
    'acting|script'
    >>> tags("A three-hour cinema master class.")
    ''
    """
    found = [name for name, rule in (("acting", ACTING), ("script", SCRIPT)) if rule.search(text)]
    return "|".join(found)


def three_class(text: str, label: int) -> str | None:
    """The 3-class label of one RT row, or None when the row is left out (most `rotten` rows).

    Examples:
    >>> three_class("The actors are wooden.", 0)
    'acting'
    """
    if ACTING.search(text):
        return "acting"
    name = LABELS[label]
    if name == "rotten" and (_h(text) // 14) % 5 >= 3:
        return None
    return name


def _rt(split: str) -> list[tuple[str, int]]:
    with open(rotten_tomatoes_dir() / f"{split}.csv", newline="", encoding="utf-8") as f:
        return [(row["text"], int(row["label"])) for row in csv.DictReader(f)]


def rare_rows(split: str) -> list[tuple[str, str]]:
    """The rare-label set's (text, tags) rows of one split."""
    keep = {"train": lambda h: h % 7 == 0, "dev": lambda h: h % 2 == 0, "test": lambda h: True}
    return [(text, tags(text)) for text, _ in _rt(split) if keep[split](_h(text))]


def three_rows(split: str) -> list[tuple[str, str]]:
    """The 3-class set's (text, label) rows of one split."""
    rows = []
    for text, label in _rt(split):
        if split == "train" and _h(text) % 14 != 1:
            continue
        name = three_class(text, label)
        if name is not None:
            rows.append((text, name))
    return rows


def rt_rows(split: str) -> list[tuple[str, str]]:
    """Rotten Tomatoes itself, every row, its label named (`fresh` / `rotten`): the easy,
    balanced reference the hard sets are compared with."""
    return [(text, LABELS[label]) for text, label in _rt(split)]


def write(folder: Path) -> dict:
    """Writes the sets' CSVs (`text,label`) under `folder`; returns their row counts and label
    shares."""
    summary = {}
    for name, make in (("rare", rare_rows), ("three", three_rows), ("rt", rt_rows)):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for split in ("train", "dev", "test"):
            rows = make(split)
            with open(folder / name / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(["text", "label"])
                writer.writerows(rows)
            counts: dict[str, int] = {}
            for _, label in rows:
                for item in filter(None, label.split("|")):
                    counts[item] = counts.get(item, 0) + 1
            shares = {k: round(v / len(rows), 4) for k, v in sorted(counts.items())}
            summary[f"{name}/{split}"] = {"rows": len(rows), "shares": shares}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    for name, value in write(parser.parse_args().folder).items():
        print(name, value)


if __name__ == "__main__":
    main()
