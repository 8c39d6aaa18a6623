"""The suite's tasks and the config file each one starts from.

Every task has two configs in ``configs/``: the paper's setting (official data, Table II /
Table 7 sizes) and its ``-cpu`` config (offline data, small model), the ``[overlay.cpu]``
table of the same file.  The ``paper`` budget starts from the first, every other budget
from the second; the budget then overrides sizes and steps (:mod:`.budgets`) and the
variant the mixer (:mod:`.variants`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Task:
    """One column of the tables.

    - ``name``: the cell key (``--tasks``); ``label``: the column header.
    - ``group``: "lra", "uea" or "lm" (which table the column is in).
    - ``paper_config`` / ``small_config``: paths under ``configs/``; ``X-cpu.toml`` names
      ``X.toml`` with its ``[overlay.cpu]`` table (:data:`weirdnet.config.toml.OVERLAYS`).
    - ``metric``: the test metric reported ("accuracy" in %, "bpc").
    - ``data_note``: what the small config trains on (it differs from the paper's data);
      the report adds the sizes a budget sets (:func:`.document.data_text`).
    """

    name: str
    label: str
    group: str
    paper_config: str
    small_config: str
    metric: str = "accuracy"
    data_note: str = ""

    @property
    def higher_is_better(self) -> bool:
        """True for accuracy, False for bits per character."""
        return self.metric != "bpc"


TASKS = (
    Task("listops", "ListOps", "lra", "lra/listops.toml", "lra/listops-cpu.toml",
         data_note="generated with LRA's generator"),
    Task("text", "Text", "lra", "lra/text.toml", "lra/text-cpu.toml",
         data_note="Pang & Lee IMDb reviews (1,500), bytes"),
    Task("retrieval", "Retrieval", "lra", "lra/retrieval.toml", "lra/retrieval-cpu.toml",
         data_note="links between Python documentation pages, 2 documents"),
    Task("image", "Image", "lra", "lra/image.toml", "lra/image-cpu.toml",
         data_note="Fashion-MNIST, 28x28 (LRA: grey CIFAR-10, 32x32)"),
    Task("pathfinder", "Pathfinder", "lra", "lra/pathfinder.toml", "lra/pathfinder-cpu.toml",
         data_note="generated 32x32 images (LRA's snakes2 generator)"),
    Task("jv", "JapaneseVowels", "uea", "uea/japanese-vowels.toml",
         "uea/japanese-vowels-cpu.toml", data_note="the UEA archive files"),
    Task("scp1", "SelfRegulationSCP1", "uea", "uea/self-regulation-scp1.toml",
         "uea/self-regulation-scp1-cpu.toml", data_note="the UEA archive files"),
    Task("scp2", "SelfRegulationSCP2", "uea", "uea/self-regulation-scp2.toml",
         "uea/self-regulation-scp2-cpu.toml", data_note="the UEA archive files"),
    Task("lm", "wiki-xml LM", "lm", "lm/enwik8-weirdnet-small.toml",
         "lm/enwik8-weirdnet-small-cpu.toml", metric="bpc",
         data_note="6 MB of Wikipedia XML (enwik8's format), byte level"),
)
TASKS_BY_NAME = {t.name: t for t in TASKS}
LRA_TASKS = tuple(t.name for t in TASKS if t.group == "lra")


def get_task(name: str) -> Task:
    """The task called ``name``; a clear error lists the known ones."""
    if name not in TASKS_BY_NAME:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS_BY_NAME)}")
    return TASKS_BY_NAME[name]


def configs_dir() -> Path:
    """The configs the suite builds on: the ones shipped in the package
    (``$WEIRDNET_CONFIGS`` overrides; see :mod:`weirdnet.train.named_configs`)."""
    from weirdnet.train import config_dir

    return config_dir()
