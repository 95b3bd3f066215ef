"""The README and the manual in docs/ are checked like code: every fenced block carries a
language and is checked as its language allows (tests/test_readme.py runs the Python examples
on a tiny model); docs/cli.md is what the parser says; every page is in the site's nav and on its
home page.

`make docs` builds the site with `mkdocs build --strict`, which checks the links between pages
and their anchors; these tests need no mkdocs and load no TensorFlow."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex

import pytest
import yaml

import bertfit
from tests.markdown_blocks import PAGES, ROOT, all_blocks, code_blocks

_spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts/cli_reference.py")
cli_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_reference)

# What each language's blocks get: sh is parsed command by command, python compiled (and the
# README's examples run, tests/test_readme.py), json and yaml parsed; text is output as printed;
# diff (adding_a_family.md's registry edits) is applied by tests/model/test_adding_a_family.py.
LANGUAGES = {"sh", "python", "json", "yaml", "text", "diff"}
# Programs other than bertfit that the manual's commands call, and what they are for.
OTHER_PROGRAMS = {
    "cat": "pipes a file into `bertfit predict --data -`",
    "curl": "a REST request to `bertfit serve`",
    "gcloud": "copies a prepared set into a bucket; runs bertfit on every host of a TPU pod",
    "saved_model_cli": "TensorFlow's own look at an export",
    "source": "activates `make demo`'s venv in a clone (the README)",
    "tensorboard": "a run's TensorBoard events",
    "text-embeddings-router": "Text Embeddings Inference serving an --format hf export",
    "vllm": "vLLM serving an --format hf export",
}
SEPARATORS = {"|", "||", "&&", ";", "&"}
REDIRECTS = {">", ">>", "<", "2>"}


def _id(block) -> str:
    return block.where


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a sh block: continuation lines joined, comments dropped, pipelines and
    `&&` lists split, redirections and their targets left out."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        command, skip = [], False
        for token in lexer:
            if skip:
                skip = False
            elif token in REDIRECTS:
                skip = True
            elif token in SEPARATORS:
                commands.append(command)
                command = []
            else:
                command.append(token)
        commands.append(command)
    return [_without_assignments(c) for c in commands if _without_assignments(c)]


def _without_assignments(command: list[str]) -> list[str]:
    """The command after its leading `NAME=value` environment assignments, as a shell runs it."""
    while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
        command = command[1:]
    return command


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", text, re.M))


def _extras() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    extras = text.split("[project.optional-dependencies]")[1].split("\n[")[0]
    return set(re.findall(r"^([a-z0-9-]+) = \[", extras, re.M))


def check_command(argv: list[str], capsys) -> None:
    """Fails, saying why, unless the command is one the manual may show as it is written."""
    program, args = argv[0], argv[1:]
    if program == "bertfit":
        try:
            cli_reference.bertfit_parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"bertfit {shlex.join(args)}: {capsys.readouterr().err.strip()}")
    elif program == "make":
        assert set(args) <= _makefile_targets(), f"no such make target: {args}"
    elif program == "pip":
        assert args[0] == "install", argv
        named = [re.fullmatch(r"(?:bertfit|\.)\[([a-z0-9,-]+)\]", a) for a in args]
        extras = {e for m in named if m for e in m[1].split(",")}
        assert extras <= _extras(), f"no such extra of bertfit: {extras - _extras()}"
    elif program in ("python", "python3"):
        assert args[0] == "-m", argv
        module = ROOT.joinpath(*args[1].split("."))
        assert module.with_suffix(".py").is_file() or module.is_dir(), f"no module {args[1]}"
    elif program.startswith("scripts/"):
        assert (ROOT / program).is_file(), f"no script {program}"
    else:
        assert program in OTHER_PROGRAMS, f"{program}: add it to OTHER_PROGRAMS, saying why"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_opens_a_block_with_a_language_and_closes_it(page):
    fences = [line for line in page.read_text().splitlines() if line.lstrip().startswith("```")]
    blocks = code_blocks(page)
    assert len(fences) == 2 * len(blocks), f"{page}: a fence that opens no block or never closes"
    # MkDocs' Markdown renders a fence inside a list item as inline code: end the list first
    assert all(line.startswith("```") for line in fences), f"{page}: an indented fence"
    unknown = [(b.where, b.lang) for b in blocks if b.lang not in LANGUAGES]
    assert not unknown, f"fences need one of {sorted(LANGUAGES)} (text: output as printed)"


@pytest.mark.parametrize("block", all_blocks("sh"), ids=_id)
def test_shell_blocks_run_only_commands_and_flags_that_exist(block, capsys):
    for argv in shell_commands(block.text):
        check_command(argv, capsys)


def test_a_misspelt_flag_or_choice_in_a_shell_block_fails_the_check(capsys):
    for bad in (
        "bertfit train --model m --train t.csv --learning-rte 5e-5",
        "bertfit export --run runs/sst out --format tflite",
        "cat x.jsonl | bertfit predict --run r --data - --outptu -",
    ):
        with pytest.raises(pytest.fail.Exception, match="unrecognized arguments|invalid choice"):
            for argv in shell_commands(bad):
                check_command(argv, capsys)
    with pytest.raises(AssertionError, match="no such extra"):
        check_command(shlex.split("pip install 'bertfit[serving]'"), capsys)
    with pytest.raises(AssertionError, match="OTHER_PROGRAMS"):
        check_command(["wget", "x"], capsys)


def test_shell_commands_are_split_as_a_shell_would():
    text = (
        "cat new.jsonl | bertfit predict --run runs/sst --data - --output - > out.jsonl\n"
        "bertfit train --model m \\\n  --train 'data/train-*.csv'   # a comment\n"
    )
    assert shell_commands(text) == [
        ["cat", "new.jsonl"],
        ["bertfit", "predict", "--run", "runs/sst", "--data", "-", "--output", "-"],
        ["bertfit", "train", "--model", "m", "--train", "data/train-*.csv"],
    ]


@pytest.mark.parametrize("block", all_blocks("python"), ids=_id)
def test_python_blocks_compile_and_name_only_bertfits_public_names(block):
    compile(block.text, block.where, "exec")
    for name in re.findall(r"\bbertfit\.([A-Za-z_]\w*)", block.text):
        module = ROOT / "bertfit" / name
        assert name in bertfit.__all__ or module.with_suffix(".py").is_file() or module.is_dir(), (
            f"{block.where}: bertfit.{name} is not a public name of bertfit"
        )


@pytest.mark.parametrize("block", all_blocks("json") + all_blocks("yaml"), ids=_id)
def test_json_and_yaml_blocks_parse(block):
    json.loads(block.text) if block.lang == "json" else yaml.safe_load(block.text)


def test_the_cli_reference_is_what_the_parser_says():
    """docs/cli.md is generated; after changing a flag: python scripts/cli_reference.py."""
    assert (ROOT / "docs" / "cli.md").read_text() == cli_reference.reference(), (
        "docs/cli.md is out of date: run python scripts/cli_reference.py and commit it"
    )


def test_the_cli_reference_names_every_command_and_flag():
    page = (ROOT / "docs" / "cli.md").read_text()
    for name, _, sub in cli_reference.subcommands(cli_reference.bertfit_parser()):
        assert f"## bertfit {name}\n" in page
        for action in sub._actions:
            for flag in [] if action.dest == "help" else action.option_strings:
                assert f"`{flag}`" in page, (name, flag)


def test_every_page_is_in_the_sites_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav) -> list[str]:
        items = nav.values() if isinstance(nav, dict) else nav
        found = []
        for item in items:
            found += [item] if isinstance(item, str) else pages(item)
        return found

    assert config["strict"] is True
    in_nav = pages(config["nav"])
    assert sorted(in_nav) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    # page.html links, not folders: site/index.html opened from disk navigates
    assert config["use_directory_urls"] is False


def test_the_manuals_home_page_links_every_page():
    home = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[^)]*)?\)", home))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert sorted(pages - linked) == [], "docs/index.md lists every page of the manual"


# What a command line needs beyond bertfit[cpu], by a word of the line: the extra to install.
EXTRA_NEEDED = {
    "bertfit serve": "serve",
    "--engine onnx": "export",
    "--format onnx": "export",
    "--format litert": "export",
    "--backend jax": "jax",
    "gs://": "storage",
    "s3://": "storage",
    ".parquet": "parquet",
}


def _demo_extras() -> set[str]:
    (extras,) = re.findall(r"^DEMO_EXTRAS\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    return set(extras.split(","))


def test_a_readme_command_the_demo_venv_cannot_run_names_its_extra_beside_it():
    """`make demo`'s venv (DEMO_EXTRAS) runs every command line of the README, but those that
    say which extra they need, on their line."""
    lines = [
        line
        for block in code_blocks(ROOT / "README.md")
        if block.lang == "sh"
        for line in block.text.replace("\\\n", " ").splitlines()
    ]
    unsaid = [
        (line, f"bertfit[{extra}]")
        for line in lines
        for word, extra in EXTRA_NEEDED.items()
        if word in line and extra not in _demo_extras() and f"bertfit[{extra}]" not in line
    ]
    assert not unsaid
    assert ["bertfit[export]" in line for line in lines if "--engine onnx" in line] == [True]
    assert ["bertfit[serve]" in line for line in lines if "bertfit serve" in line] == [True]


def test_the_readme_is_a_guide_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "the manual belongs in docs/; the README is a guide"
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if not re.match(r"[a-z]+://", target):
            assert (ROOT / target).exists(), f"README links to a missing {target}"
