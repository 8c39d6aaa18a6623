"""The training configs shipped inside the package, reachable by name.

The repository's ``configs/`` is the package's ``weirdnet/configs`` (a link in the source
tree, real files in a wheel), so after ``pip install weirdnet``::

    weirdnet train lra/listops-cpu          # = configs/lra/listops-cpu.toml
    weirdnet configs                         # every config, with the paper table it follows

A path that exists is always used as given; a name is looked up here.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from weirdnet.typed_config import ConfigError

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
    """Every packaged config's name: its path under the configs folder without ``.toml``."""
    root = config_dir()
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.toml"))


def resolve(name_or_path: str | os.PathLike) -> Path:
    """An existing file or directory as given; else the packaged config of that name
    (``lra/listops-cpu``, with or without ``.toml`` or a leading ``configs/``)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    name = path.as_posix().removeprefix("configs/").removesuffix(".toml")
    candidate = config_dir() / f"{name}.toml"
    if candidate.is_file():
        return candidate
    close = difflib.get_close_matches(name, names(), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"{name_or_path} is neither a file nor a packaged config{hint} "
                      "(`weirdnet configs` lists them)")


@dataclass(frozen=True)
class ConfigSummary:
    """A packaged config: its name and the first sentence of its header comment (which
    names the paper table it follows)."""

    name: str
    summary: str


def summaries() -> list[ConfigSummary]:
    """Every packaged config with the opening sentence of its header comment."""
    root = config_dir()
    return [ConfigSummary(name, _header(root / f"{name}.toml")) for name in names()]


def _header(path: Path) -> str:
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words.append(line.lstrip("#").strip())
    text = " ".join(w for w in words if w)
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]
