"""seq2seq-digits: synthetic reverse / sort / add pairs as ASCII bytes with bos/eos."""

import pytest
import torch

from weirdnet.data import get
from weirdnet.data.collate import pad_collate
from weirdnet.data.seq2seq.digits import BOS_ID, EOS_ID, decode

N = 300


def _check_pair(task: str, src: str, tgt: str) -> None:
    if task == "reverse":
        assert tgt == src[::-1]
    elif task == "sort":
        assert tgt == "".join(sorted(src))
    else:
        a, b = src.split("+")
        assert int(tgt) == int(a) + int(b)
        for operand in (a, b, tgt):
            assert operand.isdigit() and (operand == "0" or not operand.startswith("0"))


@pytest.mark.parametrize("task", ["reverse", "sort", "add"])
def test_targets_are_correct(task):
    data = get("seq2seq-digits", "train", task=task, max_digits=6, num_samples=N)
    assert len(data) == N
    for i in range(N):
        item = data[i]
        src, tgt = item["src"], item["tgt"]
        assert src.dtype == tgt.dtype == torch.long
        assert tgt[0] == BOS_ID and tgt[-1] == EOS_ID
        assert not ({BOS_ID, EOS_ID, 0} & set(src.tolist() + tgt[1:-1].tolist()))
        assert max(len(src), len(tgt)) <= data.info.max_len
        assert (decode(src), decode(tgt)) == data.pair(i)
        _check_pair(task, decode(src), decode(tgt))
        assert bytes(tgt[1:-1].tolist()).decode("ascii") == decode(tgt)


@pytest.mark.parametrize("task, longest", [("reverse", 8), ("sort", 8), ("add", 13)])
def test_lengths_span_the_bounds_and_info(task, longest):
    data = get("seq2seq-digits", "val", task=task, min_digits=2, max_digits=6, num_samples=N)
    operands = [op for i in range(N) for op in data.pair(i)[0].split("+")]
    assert {len(op) for op in operands} == {2, 3, 4, 5, 6}
    info = data.info
    assert (info.task, info.vocab_size, info.pad_id, info.bos_id, info.eos_id,
            info.encoding, info.max_len) == ("seq2seq", 256, 0, 2, 3, "ascii", longest)
    fixed = get("seq2seq-digits", "test", task=task, min_digits=3, max_digits=3, num_samples=20)
    assert {len(fixed[i]["src"]) for i in range(20)} == {7 if task == "add" else 3}


def test_items_are_reproducible_and_independent_of_order():
    data = get("seq2seq-digits", "train", task="add", num_samples=50)
    forward = [data.pair(i) for i in range(50)]
    again = get("seq2seq-digits", "train", task="add", num_samples=10)
    assert [again.pair(i) for i in reversed(range(10))] == forward[:10][::-1]
    assert torch.equal(data[7]["tgt"], again[7]["tgt"])
    other_split = get("seq2seq-digits", "val", task="add", num_samples=50)
    other_seed = get("seq2seq-digits", "train", task="add", num_samples=50, seed=1)
    assert [other_split.pair(i) for i in range(50)] != forward
    assert [other_seed.pair(i) for i in range(50)] != forward
    assert len(get("seq2seq-digits", "train")) == 20_000
    assert len(get("seq2seq-digits", "test")) == 1_000
    with pytest.raises(IndexError):
        data[50]


@pytest.mark.parametrize("options, message", [
    ({"min_digits": 0}, "min_digits must be an integer >= 1"),
    ({"min_digits": 5, "max_digits": 4}, "max_digits must be >= min_digits"),
    ({"num_samples": 0}, "num_samples must be an integer >= 1"),
    ({"task": "revers"}, "'reverse', 'sort', 'add'"),
    ({"seed": -1}, "seed must be an integer >= 0"),
])
def test_bad_options_raise(options, message):
    with pytest.raises(ValueError, match=message):
        get("seq2seq-digits", "train", **options)


def test_pad_collate_masks_src_and_tgt():
    data = get("seq2seq-digits", "train", task="add", max_digits=4, num_samples=8)
    items = [data[i] for i in range(8)]
    batch = pad_collate(items, pad_id=data.info.pad_id)
    assert set(batch) == {"src", "src_mask", "tgt", "tgt_mask"}
    for key in ("src", "tgt"):
        lengths = torch.tensor([len(item[key]) for item in items])
        assert batch[key].shape == (8, int(lengths.max()))
        assert torch.equal(batch[f"{key}_mask"].sum(1), lengths)
        assert (batch[key][~batch[f"{key}_mask"]] == 0).all()
        for i, item in enumerate(items):
            assert torch.equal(batch[key][i, :len(item[key])], item[key])
