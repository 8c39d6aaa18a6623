"""The training configs shipped inside the package, reachable by name.

The repository's ``configs/`` is the package's ``weirdnet/configs`` (a link in the source
tree, real files in a wheel), so after ``pip install weirdnet``::

    weirdnet train lra/listops               # = configs/lra/listops.toml
    weirdnet train lra/listops-cpu           # = the same file with its [overlay.cpu] table
    weirdnet configs                         # every config, with the paper table it follows
    weirdnet configs show lra/listops-cpu    # one config resolved, every key written out

A config's name is its file's path under the folder without ``.toml``; ``X-NAME`` names
file ``X.toml`` with its ``[overlay.NAME]`` table applied (:data:`~weirdnet.train.config.
OVERLAYS`), and so does the path ``X-NAME.toml`` though no such file exists.  A path that
exists (or names an overlay of a file that exists) is used as given; a name is looked up
here.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from weirdnet.config.toml import OVERLAYS, overlay_names, overlay_source
from weirdnet.config.typed import ConfigError

ENV = "WEIRDNET_CONFIGS"


def config_dir() -> Path:
    """The packaged configs (``$WEIRDNET_CONFIGS`` overrides, e.g. a checkout's configs/)."""
    env = os.environ.get(ENV)
    path = Path(env) if env else Path(__file__).resolve().parents[1] / "configs"
    if not (path / "quickstart.toml").is_file():
        where = f"${ENV}={env}" if env else "the installed weirdnet package"
        raise ConfigError(f"no weirdnet configs in {path} ({where}); reinstall weirdnet or "
                          f"point {ENV} at a checkout's configs/")
    return path


def names() -> list[str]:
    """Every packaged config's name: each file's path under the configs folder without
    ``.toml``, and ``<that>-NAME`` for each of its ``[overlay.NAME]`` tables."""
    root = config_dir()
    found = []
    for path in root.rglob("*.toml"):
        name = path.relative_to(root).with_suffix("").as_posix()
        found += [name, *(f"{name}-{overlay}" for overlay in overlay_names(path))]
    return sorted(found)


def resolve(name_or_path: str | os.PathLike) -> Path:
    """An existing file or directory, or a file's overlay (``X-cpu.toml`` for ``X.toml``),
    as given; else the packaged config of that name (``lra/listops-cpu``, with or without
    ``.toml`` or a leading ``configs/``)."""
    path = Path(name_or_path)
    if path.exists() or overlay_source(path):
        return path
    name = path.as_posix().removeprefix("configs/").removesuffix(".toml")
    candidate = config_dir() / f"{name}.toml"
    if candidate.is_file() or overlay_source(candidate):
        return candidate
    close = difflib.get_close_matches(name, names(), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"{name_or_path} is neither a file nor a packaged config{hint} "
                      "(`weirdnet configs list` lists them)")


@dataclass(frozen=True)
class ConfigSummary:
    """A packaged config: its name and the first sentence of its header comment (which
    names the paper table it follows)."""

    name: str
    summary: str


def summaries() -> list[ConfigSummary]:
    """Every packaged config with the opening sentence of its header comment (an overlay's:
    the comment just above its ``[overlay.NAME]`` line)."""
    root = config_dir()
    out = []
    for name in names():
        path = root / f"{name}.toml"
        found = None if path.is_file() else overlay_source(path)
        lines = (found[0] if found else path).read_text(encoding="utf-8").splitlines()
        if found:
            header = re.compile(rf"\[\s*{OVERLAYS}\.{found[1]}\s*\]\s*(#.*)?")
            end = next((i for i, line in enumerate(lines) if header.fullmatch(line)), 0)
            start = end
            while start and lines[start - 1].startswith("#"):
                start -= 1
            lines = lines[start:end]
        out.append(ConfigSummary(name, _first_sentence(lines)))
    return out


def _first_sentence(lines: list[str]) -> str:
    """The first sentence of the comment lines that open ``lines``."""
    words = []
    for line in lines:
        if not line.startswith("#"):
            break
        words.append(line.lstrip("#").strip())
    text = " ".join(w for w in words if w)
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]
