"""The recall diagnostics' generators (MQAR, selective copying, induction heads): what
every item holds, their statistics, the registry entries and the recall task."""

import hashlib
import json

import numpy as np
import pytest
import torch

from helpers.train import write_config
from weirdnet import data
from weirdnet.data.recall import IGNORE, induction_sample, mqar_sample, selective_copy_sample


def items(name, n=400, **options):
    dataset = data.get(name, "train", num_samples=n, **options)
    return dataset, [dataset[i] for i in range(n)]


def test_mqar_items_ask_every_key_once_after_the_pairs():
    dataset, batch = items("mqar", seq_len=48, num_pairs=6, vocab_size=41)
    keys_available = 20
    assert dataset.info.task == "recall" and dataset.info.vocab_size == 41
    assert dataset.chance == pytest.approx(1 / 20)
    for item in batch:
        tokens, targets = item["tokens"].numpy(), item["targets"].numpy()
        assert tokens.shape == targets.shape == (48,)
        keys, values = tokens[0:12:2], tokens[1:12:2]
        assert len(set(keys)) == 6 and keys.min() >= 1 and keys.max() <= keys_available
        assert values.min() > keys_available and values.max() < 41
        asked = np.flatnonzero(targets != IGNORE)
        assert len(asked) == 6 and asked.min() >= 12
        pair = dict(zip(keys.tolist(), values.tolist()))
        assert sorted(tokens[asked].tolist()) == sorted(keys.tolist())
        assert all(targets[p] == pair[tokens[p]] for p in asked)
        rest = np.setdiff1d(np.arange(12, 48), asked)
        assert (tokens[rest] == 0).all()


def test_mqar_statistics():
    """Query positions uniform over the region after the pairs; values uniform."""
    _, batch = items("mqar", n=2000, seq_len=64, num_pairs=4, vocab_size=21)
    positions = np.concatenate([np.flatnonzero(b["targets"].numpy() != IGNORE)
                                for b in batch])
    assert abs(positions.mean() - (8 + 63) / 2) < 1.0  # uniform on [8, 63]: mean 35.5
    values = np.concatenate([b["targets"].numpy()[b["targets"].numpy() != IGNORE]
                             for b in batch])
    counts = np.bincount(values - 11, minlength=10)
    expected = len(values) / 10
    assert ((counts - expected) ** 2 / expected).sum() < 30  # chi-square, 9 dof


def test_mqar_default_items_are_unchanged():
    """The options added for Zoology's recipe leave the default items bit for bit as they
    were (the stored recall records were made from them): a digest of 50 items."""
    digest = hashlib.sha256()
    for i in range(50):
        for array in mqar_sample(np.random.default_rng([7, i]), seq_len=64, num_pairs=8,
                                 vocab_size=64):
            digest.update(array.tobytes())
    assert digest.hexdigest()[:16] == "13ea85200a39b5ad"


def test_mqar_zoology_placement_and_sampling_without_replacement():
    """Zoology's recipe: keys and values distinct within a sequence, each query at an
    even offset after the pairs, the gap index drawn by the power law (most queries soon
    after the pairs)."""
    seq_len, pairs, vocab = 128, 8, 8192
    space = (seq_len - 2 * pairs) // 2
    counts = np.zeros(space)
    for i in range(400):
        tokens, targets = mqar_sample(np.random.default_rng(i), seq_len=seq_len,
                                      num_pairs=pairs, vocab_size=vocab,
                                      placement="power-law", distinct_values=True)
        keys, values = tokens[0:2 * pairs:2], tokens[1:2 * pairs:2]
        assert len(set(keys)) == pairs and len(set(values)) == pairs
        asked = np.flatnonzero(targets != IGNORE)
        assert len(asked) == pairs and (asked >= 2 * pairs).all()
        offsets = asked - 2 * pairs
        assert (offsets % 2 == 0).all()
        assert sorted(tokens[asked]) == sorted(keys)  # every key asked once
        assert {int(tokens[a]): int(targets[a]) for a in asked} == dict(zip(keys, values))
        assert (np.delete(tokens[2 * pairs:], offsets) == 0).all()  # the rest is filler
        counts[offsets // 2] += 1
    # P(g) ~ (g + 1) ** -0.99: the first gaps are drawn far more often than the last ones
    assert counts[:4].sum() > 4 * counts[-4:].sum()
    assert counts[:space // 2].sum() > 0.6 * counts.sum()
    uniform = [mqar_sample(np.random.default_rng(i), seq_len=seq_len, num_pairs=pairs,
                           vocab_size=vocab)[1] for i in range(200)]
    late = np.mean([np.mean(np.flatnonzero(t != IGNORE)) for t in uniform])
    assert late > 2 * pairs + (seq_len - 2 * pairs) * 0.4  # uniform: about the middle
    with pytest.raises(ValueError, match="must be >= 64"):
        mqar_sample(np.random.default_rng(0), seq_len=60, num_pairs=16, vocab_size=vocab,
                    placement="power-law")
    with pytest.raises(ValueError, match="placement must be one of"):
        mqar_sample(np.random.default_rng(0), placement="late")


def test_selective_copy_items_and_statistics():
    dataset, batch = items("selective-copy", n=1000, seq_len=40, num_tokens=5, vocab_size=12)
    assert dataset.chance == pytest.approx(1 / 10)
    firsts = []
    for item in batch:
        tokens, targets = item["tokens"].numpy(), item["targets"].numpy()
        data_positions = np.flatnonzero(tokens[:35] != 0)
        assert len(data_positions) == 5 and (tokens[35:] == 1).all()
        assert (targets[:35] == IGNORE).all()
        assert targets[35:].tolist() == tokens[data_positions].tolist()
        assert tokens[data_positions].min() >= 2 and tokens.max() < 12
        firsts.append(data_positions[0])
    # the first of 5 uniform distinct positions in [0, 35): mean (35 + 1) / 6 - 1 = 5
    assert abs(np.mean(firsts) - 5.0) < 0.5


def test_induction_items_and_statistics():
    dataset, batch = items("induction", n=2000, seq_len=30, vocab_size=10)
    assert dataset.chance == pytest.approx(1 / 8)
    firsts, answers = [], []
    for item in batch:
        tokens, targets = item["tokens"].numpy(), item["targets"].numpy()
        triggers = np.flatnonzero(tokens == 1)
        assert len(triggers) == 2 and triggers[1] == 29 and triggers[0] <= 27
        assert (targets[:29] == IGNORE).all() and targets[29] == tokens[triggers[0] + 1]
        assert tokens.min() >= 1 and tokens.max() < 10
        firsts.append(triggers[0])
        answers.append(targets[29])
    assert abs(np.mean(firsts) - 13.5) < 0.6  # uniform on [0, 27]
    counts = np.bincount(np.array(answers) - 2, minlength=8)
    assert ((counts - 250) ** 2 / 250).sum() < 25  # chi-square, 7 dof


@pytest.mark.parametrize("name", ["mqar", "selective-copy", "induction"])
def test_items_are_seeded_and_the_splits_differ(name):
    a = data.get(name, "train", num_samples=5, seed=3)
    b = data.get(name, "train", num_samples=5, seed=3)
    c = data.get(name, "test", num_samples=5, seed=3)
    d = data.get(name, "train", num_samples=5, seed=4)
    assert all((a[i]["tokens"] == b[i]["tokens"]).all() for i in range(5))
    assert any((a[i]["tokens"] != c[i]["tokens"]).any() for i in range(5))
    assert any((a[i]["tokens"] != d[i]["tokens"]).any() for i in range(5))
    assert len(data.get(name, "val")) == 500
    with pytest.raises(IndexError):
        a[5]


@pytest.mark.parametrize("name, options", [("mqar", {"vocab_size": 8192}),
                                           ("mqar", {"vocab_size": 70_000}),
                                           ("selective-copy", {}), ("induction", {})])
def test_kept_items_read_back_as_drawn(name, options, monkeypatch):
    from weirdnet.data.recall import dataset as recall_dataset

    kept = data.get(name, "train", num_samples=6, seed=1, **options)
    assert kept._kept is not None
    monkeypatch.setattr(recall_dataset, "KEEP_BYTES", 0)
    drawn = data.get(name, "train", num_samples=6, seed=1, **options)
    assert drawn._kept is None  # too large to keep: every read draws again
    for i in [3, 0, 3, 5, 0]:  # first reads and second reads
        for key in ("tokens", "targets"):
            assert kept[i][key].dtype == drawn[i][key].dtype == torch.int64
            assert torch.equal(kept[i][key], drawn[i][key])
    item = kept[3]
    item["tokens"][0] = -7  # a caller's change does not reach the kept item
    assert torch.equal(kept[3]["tokens"], drawn[3]["tokens"])


def test_bad_options_get_clear_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="seq_len=20 is too short for 8 pairs"):
        mqar_sample(rng, seq_len=20, num_pairs=8)
    with pytest.raises(ValueError, match="vocab_size=11 has 5 keys"):
        mqar_sample(rng, seq_len=64, num_pairs=8, vocab_size=11)
    with pytest.raises(ValueError, match="too short to copy"):
        selective_copy_sample(rng, seq_len=10, num_tokens=6)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 3"):
        induction_sample(rng, vocab_size=2)
    with pytest.raises(ValueError, match="unknown option 'num_pair'"):
        data.get("mqar", "train", num_pair=3)
    with pytest.raises(ValueError, match="generated; it takes no root"):
        data.get("induction", "train", root="/tmp")
    with pytest.raises(ValueError, match="num_samples must be an integer >= 1"):
        data.get("selective-copy", "train", num_samples=0)


@pytest.mark.slow
def test_the_recall_task_trains_and_reports_accuracy(tmp_path):
    from weirdnet.train.config import load_config
    from weirdnet.train.trainer import train

    config = load_config(write_config(tmp_path, steps=4, eval_every=2, checkpoint_every=0),
                         [f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}",
                          "data.dataset=mqar",
                          "data.options={ seq_len = 24, num_pairs = 4, num_samples = 64 }",
                          "data.test_split=test"])
    summary = train(config, progress_bar=False)
    assert summary["task"] == "recall"
    for split in ("val", "test"):
        assert set(summary["results"][split]) == {"loss", "accuracy"}
        assert 0 <= summary["results"][split]["accuracy"] <= 1
