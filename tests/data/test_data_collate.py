"""pad_collate: padding of variable-length keys, masks, label stacking."""

import pytest
import torch
from torch.utils.data import DataLoader

from weirdnet.data.collate import pad_collate


def test_tokens_are_padded_with_a_mask_and_labels_stacked():
    items = [{"tokens": torch.tensor([5, 6, 7]), "label": 1},
             {"tokens": torch.tensor([8]), "label": 0}]
    batch = pad_collate(items, pad_id=0)
    assert batch["tokens"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["tokens"].dtype == torch.long
    assert batch["tokens_mask"].tolist() == [[True, True, True], [True, False, False]]
    assert batch["label"].dtype == torch.long and batch["label"].tolist() == [1, 0]


def test_values_keep_their_channels_and_pad_with_zero():
    items = [{"values": torch.ones(2, 3), "label": 2}, {"values": torch.ones(4, 3), "label": 1}]
    batch = pad_collate(items, pad_id=0)
    assert batch["values"].shape == (2, 4, 3) and batch["values"].dtype == torch.float32
    assert batch["values"][0, 2:].abs().sum() == 0
    assert batch["values_mask"].sum(1).tolist() == [2, 4]


def test_two_documents_get_two_masks_and_custom_pad_id():
    items = [{"tokens": torch.tensor([1, 2]), "tokens2": torch.tensor([3]), "label": 1},
             {"tokens": torch.tensor([4]), "tokens2": torch.tensor([5, 6, 7]), "label": 0}]
    batch = pad_collate(items, pad_id=-1)
    assert batch["tokens"].tolist() == [[1, 2], [4, -1]]
    assert batch["tokens2"].tolist() == [[3, -1, -1], [5, 6, 7]]
    assert set(batch) == {"tokens", "tokens_mask", "tokens2", "tokens2_mask", "label"}


def test_scalars_strings_and_dataloader():
    items = [{"x": torch.tensor(1.5), "y": 0.5, "name": "a"},
             {"x": torch.tensor(2.5), "y": 1, "name": "b"}]
    batch = pad_collate(items)
    assert batch["x"].tolist() == [1.5, 2.5] and batch["y"].dtype == torch.float32
    assert batch["name"] == ["a", "b"]
    data = [{"tokens": torch.arange(n), "label": n} for n in (1, 2, 3)]
    (loaded,) = DataLoader(data, batch_size=3, collate_fn=pad_collate)
    assert loaded["tokens"].shape == (3, 3) and loaded["label"].tolist() == [1, 2, 3]


def test_mismatched_items_are_rejected():
    with pytest.raises(ValueError, match="at least one item"):
        pad_collate([])
    with pytest.raises(ValueError, match="shape"):
        pad_collate([{"values": torch.ones(2, 3)}, {"values": torch.ones(2, 4)}])
    with pytest.raises(ValueError, match="keys"):
        pad_collate([{"tokens": torch.ones(2)}, {"label": 1}])


def test_padding_to_a_multiple_is_capped_at_max_len_and_never_truncates():
    items = [{"tokens": torch.arange(1, n + 1)} for n in (3, 9)]
    batch = pad_collate(items, multiple=8)
    assert batch["tokens"].shape == (2, 16)
    assert batch["tokens_mask"].sum(1).tolist() == [3, 9]
    assert batch["tokens"][1, 9:].eq(0).all()
    assert pad_collate(items, multiple=8, max_len=12)["tokens"].shape == (2, 12)
    assert pad_collate(items, multiple=8, max_len=5)["tokens"].shape == (2, 9)  # longest
    assert pad_collate(items, multiple=1, max_len=12)["tokens"].shape == (2, 9)
    assert pad_collate(items, multiple=3)["tokens"].shape == (2, 9)


@pytest.mark.parametrize("multiple", [0, -4, 2.0, True])
def test_padding_multiple_must_be_a_positive_int(multiple):
    with pytest.raises(ValueError, match="multiple must be a positive int"):
        pad_collate([{"tokens": torch.arange(3)}], multiple=multiple)
