"""Shortcut baselines: what a classifier scores on a task without reading its input as a
sequence, so a model that only learned the shortcut is not counted as having learned the
task.

- ``first-operator`` (ListOps): each test item's label predicted from its first operator
  alone, by the most common label among the test items with that operator: the best
  classifier that sees only the first operator, on the very items the evaluation read.
  MAX is 9 in about half its items, MIN is 0, MED is 4, so this scores about a third.
- ``bag-of-tokens`` (token inputs: text, retrieval, images, Pathfinder): a multinomial
  logistic regression on each sequence's token histogram (order-free), trained on the
  task's training split and scored on the evaluated test items.  Retrieval uses both
  documents' histograms and their difference.
- ``channel-statistics`` (continuous inputs: the UEA series): the same regression on each
  channel's mean, standard deviation, minimum and maximum over the real time steps.

:func:`shortcut_baselines` computes the ones that apply to a split; the suite stores them
as records beside its cells (:mod:`.command`), and the report's bar for "the Transformer
learned the task" is the best trivial baseline (majority class or shortcut) plus
:data:`~.baselines.ACCURACY_MARGIN` points.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

MAX_TRAIN_ITEMS = 20_000
"""Training items the linear probes read at most (the first ones of the split)."""

PROBE_STEPS = 200
"""L-BFGS iterations of the logistic regression (it converges well before on these
feature sizes; more changes the test accuracy by less than 0.1 point)."""


def first_operator(split: Any, items: int) -> float:
    """ListOps: accuracy (%) of the best first-operator-only classifier on the first
    ``items`` items of ``split`` (items with ``tokens`` of the ListOps vocabulary)."""
    from weirdnet.data.lra.listops import OPERATORS, VOCAB

    operator_ids = {VOCAB.index(op) for op in OPERATORS}
    labels_by_operator: dict[int, Counter] = defaultdict(Counter)
    for index in range(items):
        item = split[index]
        tokens = [int(t) for t in item["tokens"]]
        first = next((t for t in tokens if t in operator_ids), -1)
        labels_by_operator[first][int(item["label"])] += 1
    right = sum(max(counts.values()) for counts in labels_by_operator.values())
    return 100.0 * right / items


def _histogram(tokens, vocab: int) -> np.ndarray:
    """Token frequencies of one sequence (padding, id 0, left out)."""
    ids = np.asarray(tokens, dtype=np.int64)
    counts = np.bincount(ids[ids > 0], minlength=vocab)[:vocab].astype(np.float64)
    return counts / max(counts.sum(), 1.0)


def _series_statistics(values, mask=None) -> np.ndarray:
    """Per channel: mean, standard deviation, minimum, maximum over the time steps."""
    x = np.asarray(values, dtype=np.float64)
    if mask is not None:
        x = x[np.asarray(mask, dtype=bool)]
    return np.concatenate([x.mean(0), x.std(0), x.min(0), x.max(0)])


def order_free_features(split: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(features (count, F), labels (count,)) of the first ``count`` items: token
    histograms (both documents' and their difference for pairs) or series statistics."""
    vocab = split.info.vocab_size
    rows, labels = [], []
    for index in range(count):
        item = split[index]
        if "values" in item:
            rows.append(_series_statistics(item["values"], item.get("mask")))
        elif "tokens2" in item:
            a, b = _histogram(item["tokens"], vocab), _histogram(item["tokens2"], vocab)
            rows.append(np.concatenate([a, b, np.abs(a - b)]))
        else:
            rows.append(_histogram(item["tokens"], vocab))
        labels.append(int(item["label"]))
    return np.stack(rows), np.asarray(labels, dtype=np.int64)


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                 test_y: np.ndarray, seed: int = 0) -> float:
    """Test accuracy (%) of a multinomial logistic regression (standardised features, a
    small L2 penalty, L-BFGS) trained on (train_x, train_y)."""
    import torch

    mean, std = train_x.mean(0), train_x.std(0) + 1e-8
    xs = [torch.tensor((x - mean) / std, dtype=torch.float64) for x in (train_x, test_x)]
    classes = int(max(train_y.max(), test_y.max())) + 1
    y = torch.tensor(train_y)
    generator = torch.Generator().manual_seed(seed)
    weight = (0.01 * torch.randn(xs[0].shape[1], classes, generator=generator,
                                 dtype=torch.float64)).requires_grad_()
    bias = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=PROBE_STEPS,
                                  line_search_fn="strong_wolfe")

    def loss():
        optimizer.zero_grad()
        value = torch.nn.functional.cross_entropy(xs[0] @ weight + bias, y) \
            + 1e-3 * weight.square().sum()
        value.backward()
        return value

    optimizer.step(loss)
    with torch.no_grad():
        predicted = (xs[1] @ weight + bias).argmax(1).numpy()
    return 100.0 * float((predicted == test_y).mean())


def shortcut_baselines(dataset: str, train: Any, test: Any, items: int
                       ) -> list[dict[str, Any]]:
    """The shortcut baselines of a classification split: ``[{"kind", "value" (%),
    "about"}]``, computed on the first ``items`` test items (the linear probe trained on
    at most :data:`MAX_TRAIN_ITEMS` items of ``train``)."""
    found = []
    if dataset == "listops":
        found.append({"kind": "first-operator", "value": first_operator(test, items),
                      "about": "the label predicted from the first operator alone"})
    continuous = "values" in test[0]
    train_x, train_y = order_free_features(train, min(len(train), MAX_TRAIN_ITEMS))
    test_x, test_y = order_free_features(test, items)
    kind = "channel-statistics" if continuous else "bag-of-tokens"
    about = ("a linear classifier on each channel's mean, std, min and max" if continuous
             else "a linear classifier on the token histogram (order-free)")
    found.append({"kind": kind, "value": linear_probe(train_x, train_y, test_x, test_y),
                  "about": about, "train_items": len(train_y)})
    return found


# --- the stored shortcut records of a suite's results folder ----------------------------

SHORTCUTS_DIR = "shortcuts"
"""``<results>/shortcuts/<task>.json``: each task's majority class and shortcut baselines
on the items its evaluation read, with the data they were computed on, the commit and the
machine (the majority class too, since records made before it was stored lack it)."""


def _evaluated_items(record: dict[str, Any], test_length: int) -> int:
    """How many test items ``record``'s final evaluation read: its ``evaluated`` count,
    else (records made before it was stored) what its config's ``final_eval_batches``
    allowed, else every item."""
    stated = (record.get("evaluated") or {}).get("test")
    if stated:
        return int(stated)
    train = record["config"].get("train", {})
    batches = train.get("final_eval_batches") or 0
    if batches > 0:
        return min(test_length, batches * train.get("batch_size", 1))
    return test_length


def _source(records: list[dict[str, Any]], task: str) -> dict[str, Any] | None:
    """The Transformer record whose data and evaluated items a task's shortcuts use."""
    return next((r for r in records if r.get("task") == task and r.get("variant") == "softmax"
                 and r.get("status") == "done" and "config" in r), None)


def _data_key(record: dict[str, Any]) -> dict[str, Any]:
    data = record["config"]["data"]
    return {"data": data, "evaluated": (record.get("evaluated") or {}).get("test"),
            "final_eval_batches": record["config"].get("train", {}).get("final_eval_batches")}


def read_shortcuts(store, records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each task's stored shortcut baselines, where they were computed on the data and
    items of its current Transformer records (a stale file is left out)."""
    import json

    from weirdnet_lab.sweep.store import config_hash

    found = {}
    for path in sorted((store.results_dir / SHORTCUTS_DIR).glob("*.json")):
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        source = _source(records, stored.get("task"))
        if source is not None and stored.get("data_hash") == config_hash(_data_key(source)):
            found[stored["task"]] = stored["baselines"]
    return found


def missing_tasks(store, records: list[dict[str, Any]], tasks) -> list[str]:
    """The classification tasks among ``tasks`` with a Transformer record but no current
    shortcut record."""
    have = read_shortcuts(store, records)
    return [t.name for t in tasks if t.metric == "accuracy" and t.name not in have
            and _source(records, t.name) is not None]


def compute_record(records: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """The shortcut record of ``task``: its baselines on the data and test items of its
    Transformer record, with what they were computed on, the commit and the machine."""
    import time

    import torch

    from weirdnet.data import get
    from weirdnet_lab.harness.machine import code_version, machine_info
    from weirdnet_lab.sweep.baselines import trivial_baseline
    from weirdnet_lab.sweep.store import config_hash

    started = time.perf_counter()
    source = _source(records, task)
    data = source["config"]["data"]
    root = data.get("root") or None
    options = dict(data.get("options") or {})
    test = get(data["dataset"], data.get("test_split") or "test", root=root,
               **{**options, **(data.get("eval_options") or {})})
    train = get(data["dataset"], data.get("train_split") or "train", root=root, **options)
    items = _evaluated_items(source, len(test))
    majority = trivial_baseline(test, "classification", items)  # on the same items
    baselines = [majority] + shortcut_baselines(data["dataset"], train, test, items)
    machine = machine_info(torch.device("cpu"), ["weirdnet", "bench", "suite"], "default")
    return {"task": task, "dataset": data["dataset"], "items": items,
            "baselines": baselines, "data_hash": config_hash(_data_key(source)),
            "data": data, "from_record": f"{task}--softmax--s{source.get('seed', 0)}",
            "wall_s": time.perf_counter() - started, **code_version(machine),
            "machine": machine}


def write_missing(store, records: list[dict[str, Any]], tasks) -> list[str]:
    """Compute and store the shortcut record of every task that lacks a current one
    (each written atomically); the tasks done."""
    import json

    from weirdnet.run import write_atomic

    done = []
    for task in missing_tasks(store, records, tasks):
        record = compute_record(records, task)
        folder = store.results_dir / SHORTCUTS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{task}.json", json.dumps(record, indent=2) + "\n")
        print(f"shortcut baselines of {task}: " + ", ".join(
            f"{b['kind']} {b['value']:.1f}%" for b in record["baselines"]), flush=True)
        done.append(task)
    return done
