"""A forward pass makes no device-to-host sync that its inputs do not force.

On a GPU, reading a tensor's value on the host (``.item()``, ``bool(t)``, ``int(t)``,
``.tolist()``) waits for the device.  Data-dependent checks and fast paths therefore run
only where they are free (CPU tensors in eager mode: ``weirdnet.ops.checks.on_host``).
These tests take the GPU's side of that switch on CPU tensors and count every host read
of a tensor value during a forward pass and during generation.
"""

import sys

import pytest
import torch

from weirdnet.models.classifier import WeirdNetClassifier
from weirdnet.models.lm import WeirdNetLM
from weirdnet.models.seq2seq import WeirdNetSeq2Seq

pytestmark = pytest.mark.usefixtures("one_thread")

READS = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist")
SMALL = {"dim": 16, "depth": 2, "d_ff": 32, "heads": 2, "max_len": 64, "vocab_size": 40,
         "dropout": 0.0}


@pytest.fixture
def host_reads(monkeypatch):
    """Take the device side of ``on_host`` everywhere and count tensor value reads."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("weirdnet") and \
                hasattr(module, "on_host"):
            monkeypatch.setattr(module, "on_host", lambda x: False)
    return count_reads(monkeypatch)


def count_reads(monkeypatch) -> list[str]:
    """A list that records the name of every tensor value read from now on."""
    reads = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def inputs(masked=True):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (3, 20), generator=g)
    mask = torch.ones(3, 20, dtype=torch.bool)
    if masked:
        mask[1, 12:] = False
    return ids, mask


def test_the_count_sees_the_checks_of_cpu_eager_mode(monkeypatch):
    """On CPU in eager mode the id range check reads the ids and the scan checks that
    log_w is finite (both free there): counted."""
    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {**SMALL, "pattern": "B", "causal": True}})
    reads = count_reads(monkeypatch)
    model(*inputs()[:1])
    assert reads == ["tolist", "__bool__"]  # min and max of the ids in one read; log_w


@pytest.mark.parametrize("pattern", ["B", "linear", "local", "relation", "weird,softmax"])
def test_lm_forward_reads_no_tensor_value(host_reads, pattern):
    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {**SMALL, "pattern": pattern, "causal": True}})
    ids, mask = inputs()
    host_reads.clear()
    model(ids, ids, mask).loss.backward()
    assert host_reads == []


@pytest.mark.parametrize("pattern", ["A", "dba", "linformer", "softmax"])
def test_classifier_forward_reads_no_tensor_value(host_reads, pattern):
    torch.manual_seed(0)
    model = WeirdNetClassifier({"backbone": {**SMALL, "pattern": pattern, "causal": False},
                                "num_classes": 3})
    ids, mask = inputs()
    host_reads.clear()
    model(ids, mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    assert host_reads == []


@pytest.mark.parametrize("cross", ["softmax", "dba"])
def test_seq2seq_forward_reads_no_tensor_value(host_reads, cross):
    torch.manual_seed(0)
    model = WeirdNetSeq2Seq({"encoder": {**SMALL, "pattern": "A", "causal": False},
                             "decoder": {**SMALL, "pattern": "B", "causal": True},
                             "cross": cross})
    ids, mask = inputs()
    host_reads.clear()
    model(ids, ids, mask, None, ids).loss.backward()
    assert host_reads == []


@pytest.mark.parametrize("pattern", ["B", "linear", "local", "relation"])
@pytest.mark.parametrize("padded", [False, True])
def test_generation_reads_values_once_per_call_not_per_token(host_reads, pattern, padded):
    """The prompt is checked once per generate() (ids: one read, the left-padding mask:
    one more); the token loop reads nothing (no eos)."""
    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {**SMALL, "pattern": pattern, "causal": True}})
    prompt, _ = inputs()
    prompt_mask = None
    if padded:
        prompt_mask = torch.ones(3, 6, dtype=torch.bool)
        prompt_mask[1, :2] = False
    counts = []
    for new_tokens in (1, 12):
        host_reads.clear()
        model.generate(prompt[:, :6], new_tokens, temperature=0.0, prompt_mask=prompt_mask)
        counts.append(len(host_reads))
    assert counts == [1 + padded] * 2


def test_generation_with_eos_reads_one_value_per_token(host_reads):
    """With ``eos_id`` the loop's stopping test (all sequences done?) is its only read:
    one per token before the last."""
    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {**SMALL, "pattern": "B", "causal": True}})
    prompt, _ = inputs()
    host_reads.clear()
    out = model.generate(prompt[:, :6], 12, temperature=1.0, top_k=5, top_p=0.9,
                         eos_id=39, generator=torch.Generator().manual_seed(0))
    steps = out.shape[1] - 6
    tests = steps - 1 if steps == 12 else steps  # the last token needs no test
    assert host_reads == ["tolist"] + ["__bool__"] * tests


def test_seq2seq_generation_reads_values_once_per_call(host_reads):
    torch.manual_seed(0)
    model = WeirdNetSeq2Seq({"encoder": {**SMALL, "pattern": "A", "causal": False},
                             "decoder": {**SMALL, "pattern": "B", "causal": True},
                             "cross": "dba"})
    src, src_mask = inputs()
    counts = []
    for new_tokens in (1, 12):
        host_reads.clear()
        model.generate(src, new_tokens, bos_id=1, temperature=0.0, src_mask=src_mask)
        counts.append(len(host_reads))
    assert counts == [1, 1]  # the start tokens' id check
