"""Every command the documentation shows runs as written (issue 72): the shell blocks of
the README, docs/*.md and configs/README.md, and the examples of every ``--help``.

Fast (no training):

- each ``weirdnet`` command parses with the command line's own parser, and each
  training config it names validates with its ``--set`` overrides (synopsis lines, with
  placeholders such as ``CONFIG.toml`` or ``[--resume]``, are only counted);
- every path a command of the docs writes (``--out``, ``export-hf``'s OUT, ``harness-tasks``' DIR, a
  training's run directory, a shell redirection) is ignored by git, unless it is
  ``lab/results``, where the records are committed on purpose;
- each page's commands, in order after the README's (``weirdnet train
  configs/quickstart.toml``: ``runs/quickstart`` exists), start no training over an
  existing run, name only runs, exports and data sets that exist by then, and give each
  dataset a root of the kind it takes (``docs/data.md`` once trained over
  ``runs/quickstart`` and evaluated a ``python-stdlib`` run on a text file);
- ``weirdnet data build listops --help`` states the size the build writes.

Slow: each page's commands that need no download, no GPU and no second process, run
through the command line in a folder after the README's main job, each training shrunk
with ``--set`` overrides appended and each evaluation with ``--limit`` (:data:`SMALL`).
"""

import contextlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.docs import COMMAND_PAGES, ROOT, shell_commands
from weirdnet.cli import COMMANDS, build_parser, command_module, main

README_RUN = "runs/quickstart"
"""The run the README's commands leave (``weirdnet train configs/quickstart.toml``)."""

USER_FILES = ("book.txt", "other-book.txt")
"""Files the docs ask the user to bring (docs/data.md: "a text file of yours")."""


def _help_examples() -> list[tuple[str, int, list[str]]]:
    """The ``weirdnet ...`` lines of every command's ``--help`` text, as commands."""
    import shlex

    found = []

    def walk(table: dict) -> None:
        for entry in table.values():
            if isinstance(entry, dict):
                walk(entry)
                continue
            module = command_module(entry)
            text = (module.DESCRIPTION + (getattr(module, "EXAMPLES", None) or ""))
            text = text.replace("\\\n", " ")
            for number, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if line.startswith(("weirdnet ", "python -m weirdnet")):
                    found.append((f"{entry} --help", number, shlex.split(line, comments=True)))

    walk(COMMANDS)
    return found


def _all_commands() -> list[tuple[str, int, int, list[str]]]:
    """(page, block, line, words) of every command of the docs, then of the help texts
    (block -1: each help example stands alone)."""
    found = [(page, block, line, words) for page in COMMAND_PAGES
             for block, line, words in shell_commands(page)]
    return found + [(page, -1, line, words) for page, line, words in _help_examples()]


ALL = _all_commands()

PLACEHOLDER = re.compile(r"\[|\.\.\.|\$|(?:^|[=/])[A-Z][A-Z0-9_]{2,}")


def weirdnet_argv(words: list[str]) -> list[str] | None:
    """The arguments of the ``weirdnet`` program that ``words`` runs (``weirdnet ...``,
    ``python -m weirdnet ...``, ``torchrun ... -m weirdnet ...``), without a shell
    redirection or ``&`` at its end; None for another program."""
    if words[0] == "nohup":
        return weirdnet_argv(words[1:])
    if words[0] == "weirdnet":
        argv = words[1:]
    elif words[0] in ("python", "torchrun") and "-m" in words and \
            words[words.index("-m") + 1:][:1] == ["weirdnet"]:
        argv = words[words.index("-m") + 2:]
    else:
        return None
    ends = [i for i, word in enumerate(argv) if word in (">", ">>", "2>&1", "&", "|")]
    return argv[:ends[0]] if ends else argv


def is_synopsis(argv: list[str]) -> bool:
    """A usage line with placeholders (``CONFIG.toml``, ``[--resume]``, ``...``)."""
    return any(PLACEHOLDER.search(word) for word in argv)


def _ids(commands) -> list[str]:
    return [f"{page}:{line}" for page, _, line, _ in commands]


EXAMPLES = [c for c in ALL if weirdnet_argv(c[3]) is not None
            and not is_synopsis(weirdnet_argv(c[3]))]
SYNOPSES = [c for c in ALL if weirdnet_argv(c[3]) is not None and is_synopsis(weirdnet_argv(c[3]))]


def test_the_docs_show_commands():
    """The extraction finds the docs' commands (a change of fence or format that hid
    them would make every test below pass vacuously)."""
    pages = {page for page, *_ in EXAMPLES}
    assert {"README.md", "docs/data.md", "docs/hf.md", "docs/index.md",
            "configs/README.md"} <= pages, pages
    assert len(EXAMPLES) >= 40 and len(SYNOPSES) <= 15, (len(EXAMPLES), len(SYNOPSES))


def _parsed(argv: list[str]):
    """``argv`` parsed by the ``weirdnet`` parser (a usage error fails the test)."""
    if argv[0] == "bench":
        from weirdnet.cli import plugin_commands

        if "bench" not in plugin_commands():
            pytest.skip("the lab (weirdnet-lab) is not installed: pip install -e ./lab")
    try:
        return build_parser().parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"weirdnet {' '.join(argv)} does not parse (exit {stop.code})")


@pytest.mark.parametrize("page,block,line,words", EXAMPLES, ids=_ids(EXAMPLES))
def test_every_documented_command_parses(page, block, line, words, capsys):
    _parsed(weirdnet_argv(words))


def _config(source: str, overrides: list[str]):
    """The training config ``weirdnet train SOURCE --set ...`` builds (validated)."""
    from weirdnet.train.config import load_config
    from weirdnet.train.named_configs import resolve

    return load_config(resolve(source), overrides)


TRAININGS = [c for c in EXAMPLES if weirdnet_argv(c[3])[0] == "train"
             and not weirdnet_argv(c[3])[1].startswith("runs/")]


@pytest.mark.parametrize("page,block,line,words", TRAININGS, ids=_ids(TRAININGS))
def test_every_documented_training_config_validates(page, block, line, words, monkeypatch):
    """Its config (a file of the repository or a shipped name) with its ``--set``
    overrides: every key and value checked, as ``weirdnet train`` checks them before it
    creates anything."""
    monkeypatch.chdir(ROOT)
    args = _parsed(weirdnet_argv(words))
    _config(args.config, args.overrides)


# ---- where the commands write ---------------------------------------------------------

COMMITTED = ("lab/results",)
"""Outputs that are committed on purpose (``weirdnet bench ... --out lab/results``
rewrites the records)."""


def written_paths(words: list[str]) -> list[str]:
    """The paths a documented command writes: ``--out``/``-d`` values, ``export-hf``'s
    OUT, ``harness-tasks``' DIR, a training's run directory, redirection targets."""
    found = [words[i + 1] for i, word in enumerate(words[:-1]) if word in (">", ">>")]
    argv = weirdnet_argv(words)
    if argv is None:
        return found + [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-d"]
    args = _parsed(argv)
    found += [str(args.out)] if getattr(args, "out", None) is not None else []
    if argv[0] == "harness-tasks":
        found.append(args.directory)
    if argv[0] == "train":
        if Path(args.config).parts[:1] == ("runs",):
            found.append(args.config)
        else:
            config = _config(args.config, args.overrides)
            found.append(str(Path(config.run.out_dir) / config.run.name))
    return found


def _ignored(path: str) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    assert done.returncode in (0, 1), f"git check-ignore failed on {path}"
    return done.returncode == 0


WRITERS = [c for c in ALL if c[1] >= 0
           and not (weirdnet_argv(c[3]) and is_synopsis(weirdnet_argv(c[3])))]
"""The commands of the docs' pages (a help text's example may run anywhere)."""


@pytest.mark.parametrize("page,block,line,words", WRITERS, ids=_ids(WRITERS))
def test_every_documented_output_is_ignored_by_git(page, block, line, words, monkeypatch):
    """Nothing a documented command writes inside the repository shows up in
    ``git status`` (issue 72: ``export-hf`` wrote ``hf/``, ``harness-tasks`` ``tasks/``)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.chdir(ROOT)
    for path in written_paths(words):
        if path.startswith(("~", "/")) or path.startswith(COMMITTED):
            continue
        assert _ignored(path), (f"{page}:{line} writes {path}, which git does not ignore; "
                                "write it under runs/")


# ---- each page in order, after the README's commands ----------------------------------

HARNESS = ["python", "-m", "weirdnet.hf.harness"]
"""lm-evaluation-harness through weirdnet (docs/hf.md): reads an export and task files."""


def _pages() -> dict[str, list[tuple[int, list[str]]]]:
    """The commands of each docs page that are run in order: (block, words) of every
    ``weirdnet`` command (synopses left out) and of :data:`HARNESS`."""
    pages: dict[str, list[tuple[int, list[str]]]] = {}
    for page, block, _, words in ALL:
        argv = weirdnet_argv(words)
        if block >= 0 and (words[:3] == HARNESS or (argv and not is_synopsis(argv))):
            pages.setdefault(page, []).append((block, words))
    return pages


PAGES = _pages()


def _check_root(config) -> None:
    """A relative ``data.root`` (a file the user brings, or one a command made) must be
    of the kind the dataset takes; an absolute or ``~`` root is the user's download."""
    from weirdnet.data.registry import check_root

    root = config.data.root
    if root is not None and not str(root).startswith(("~", "/")):
        check_root(config.data.dataset, root, "data.root")


README_MAIN = ["weirdnet", "train", "configs/quickstart.toml"]
"""The README's main job: a page that shows it starts with the README's commands."""


def _harness_reads(words: list[str]) -> list[str]:
    """The export and the task folder a :data:`HARNESS` command reads."""
    options = dict(zip(words[3::2], words[4::2]))
    model = dict(item.split("=", 1) for item in options["--model_args"].split(","))
    return [model["pretrained"], options["--include_path"]]


def check_sequence(commands: list[list[str]]) -> None:
    """Follow ``commands`` after the README's (in a folder that holds ``configs`` and
    the user's files): each run, export, task folder or data set they read exists when
    they name it (a command before them made it), and a new training goes to a run
    directory no earlier command made (without --resume/--overwrite)."""
    runs = {} if README_MAIN in commands else {README_RUN: ("configs/quickstart.toml", [])}
    made: set[str] = set()  # what the commands wrote, other than runs
    for words in commands:  # runs: run directory -> (config, overrides)
        if words[:3] == HARNESS:
            missing = [p for p in _harness_reads(words) if str(Path(p)) not in made]
            assert not missing, f"{' '.join(words)}: no command before it made {missing}"
            continue
        argv = weirdnet_argv(words)
        args = _parsed(argv)
        command = f"weirdnet {' '.join(argv)}"
        made.update(str(Path(p)) for p in written_paths(words))
        if argv[0] == "train" and not args.config.startswith("runs/"):
            config = _config(args.config, args.overrides)
            run = str(Path(config.run.out_dir) / config.run.name)
            assert run not in runs or args.resume or args.overwrite, \
                f"{command}: {run} exists by then (made by an earlier command)"
            _check_root(config)
            runs[run] = (args.config, args.overrides)
            continue
        named = {"train": [getattr(args, "config", None)],
                 "eval": [getattr(args, "target", None)],
                 "generate": [getattr(args, "target", None)],
                 "plot": list(getattr(args, "runs", None) or []),
                 "export-hf": [getattr(args, "source", None)]}.get(argv[0], [])
        for run in [str(Path(r)) for r in named if r is not None]:
            assert run in runs, f"{command}: no command before it made {run}"
            if argv[0] in ("train", "eval"):
                source, overrides = runs[run]
                _check_root(_config(source, [*overrides, *args.overrides]))
        root = getattr(args, "root", None)
        if argv[:2] == ["data", "show"] and root is not None:
            assert str(root) in made, f"{command}: no command before it made {root}"


def _user_folder(where: Path) -> Path:
    """A folder as a clean clone gives it to the docs' commands: ``configs`` and the
    user's own files (:data:`USER_FILES`)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "configs").symlink_to(ROOT / "configs")
    for name in USER_FILES:
        text = "".join(f"Line {i} of a text of the user's own.\n" for i in range(3000))
        (where / name).write_text(text, encoding="utf-8")
    return where


@pytest.mark.parametrize("page", list(PAGES))
def test_every_documented_page_runs_in_order_after_the_readme(page, tmp_path, monkeypatch):
    """docs/data.md trained its text-file example over the README's runs/quickstart and
    evaluated that python-stdlib run on a text file (issue 72)."""
    monkeypatch.chdir(_user_folder(tmp_path / "weirdnet"))
    check_sequence([words for _, words in PAGES[page]])


# ---- the pages, run (slow) ------------------------------------------------------------

NOT_RUN = {
    ("README.md", 0): "the README's commands: the fixture runs its main job",
    ("docs/index.md", 0): "the README's commands: the fixture runs its main job",
    ("configs/README.md", 1): "official LRA files to download, 8 processes",
    ("docs/papers.md", 0): "benchmarks of hours",
    ("docs/papers.md", 1): "benchmarks of hours",
    ("docs/training.md", 0): "usage lines; its one example is README.md's",
}
"""The docs blocks the slow test does not run, and why (each is parsed and checked in
order above).  Every other block runs: a new block runs unless it is named here."""

SKIPPED_COMMANDS = {("data", "download"): "downloads the official zips"}
"""Commands of a run block that are not run (they are parsed and checked above)."""

SMALL = {
    "train": ["--set", "train.steps=2", "--set", "train.eval_every=1",
              "--set", "train.eval_batches=1", "--set", "train.final_eval_batches=1",
              "--set", "train.batch_size=2", "--no-progress"],
    "continue": ["--set", "train.steps=4", "--no-progress"],
    "eval": ["--limit", "2"],
    "listops": ["--n", "8", "--n-val", "2", "--n-test", "2", "--no-progress"],
    "pathfinder32": ["--n", "4", "--no-progress"],
    "harness": ["--limit", "2"],
}
"""What each command gets appended in the slow test: the fewest steps, items and samples
(the last value of an option wins, so the documented forms are still what is parsed)."""


def _small(argv: list[str]) -> list[str]:
    if argv[0] == "train":
        return argv + SMALL["continue" if argv[1].startswith("runs/") else "train"]
    if argv[0] == "eval":
        return argv + SMALL["eval"]
    if argv[:2] == ["data", "build"]:
        return argv + SMALL[argv[2]]
    return argv


def test_every_docs_block_not_run_is_a_block():
    blocks = {(page, block) for page, commands in PAGES.items() for block, _ in commands}
    assert set(NOT_RUN) <= blocks, sorted(set(NOT_RUN) - blocks)


@pytest.fixture(scope="module")
def after_readme(tmp_path_factory):
    """A folder after the README's main job (``weirdnet train configs/quickstart.toml``,
    shrunk: :data:`SMALL`)."""
    where = _user_folder(tmp_path_factory.mktemp("clone") / "weirdnet")
    with contextlib.chdir(where):
        assert main(["train", "configs/quickstart.toml", *SMALL["train"]]) == 0
    return where


def _harness(words: list[str], cwd: Path) -> None:
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm-evaluation-harness is not installed: pip install -e '.[harness]'")
    from helpers.train import subprocess_env

    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(cwd / "hf-home")}
    done = subprocess.run([sys.executable, *words[1:], *SMALL["harness"]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


RUN = [page for page, commands in PAGES.items()
       if any((page, block) not in NOT_RUN for block, _ in commands)]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN)
def test_every_documented_page_runs(page, after_readme, tmp_path, capsys):
    """The page's commands, in order, through the command line, in a copy of the folder
    the README's commands left, each one shrunk (:data:`SMALL`); the blocks of
    :data:`NOT_RUN` and the commands of :data:`SKIPPED_COMMANDS` left out."""
    where = tmp_path / "weirdnet"
    shutil.copytree(after_readme, where, symlinks=True)
    commands = [words for block, words in PAGES[page] if (page, block) not in NOT_RUN]
    if any(words[:3] == HARNESS or weirdnet_argv(words)[0] == "export-hf"
           for words in commands):
        pytest.importorskip("transformers", reason="pip install -e '.[hf]'")
    for words in commands:
        if words[:3] == HARNESS:
            _harness(words, where)
            continue
        argv = weirdnet_argv(words)
        if tuple(argv[:2]) in SKIPPED_COMMANDS:
            continue
        with contextlib.chdir(where):
            status = main(_small(argv))
        assert status == 0, f"{' '.join(words)}: exit {status}\n{capsys.readouterr().err}"


# ---- estimates the help states ----------------------------------------------------------

def test_the_listops_build_help_states_the_size_it_writes(tmp_path, capsys):
    """``weirdnet data build listops --help`` gives the size of LRA's 100K samples and per
    sample (issue 72: 660 MB came unannounced); 300 samples, built, agree within 10%."""
    from weirdnet.cli.commands.data_build import DESCRIPTION

    text = " ".join(DESCRIPTION.split())
    stated = re.search(r"The defaults write (\d+) MB \(about ([\d.]+) KB a sample", text)
    assert stated, "the help no longer says how much the default listops build writes"
    total_mb, per_sample_kb = int(stated[1]), float(stated[2])
    assert abs(total_mb - per_sample_kb * 100) <= 0.05 * total_mb  # 100,000 samples
    assert main(["data", "build", "listops", "--out", str(tmp_path), "--n", "300",
                 "--n-val", "0", "--n-test", "0", "--no-progress"]) == 0
    capsys.readouterr()
    written = sum(path.stat().st_size for path in tmp_path.glob("basic_*.tsv"))
    assert abs(written / 300 / 1e3 - per_sample_kb) <= 0.1 * per_sample_kb, written / 300
