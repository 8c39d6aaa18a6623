"""One hop per concern on the scan path (issue 63, item 4): from ``Mixer.forward`` of a
Weird-attention layer to the frame that calls the kernel, at most 7 of weirdnet's own
Python frames (the layer's entry, its scan, the sequence op that reads the
context-parallel context (issue 75), the custom op, the backend table's input
preparation, the backend, the C thread pool), counted from a real call with
``sys.setprofile``; torch.library's own dispatch frames are not counted.  The layer's
inputs are checked once, on entry: the op's public checks do not run again."""

import os
import sys

import pytest
import torch

import weirdnet
from weirdnet.layers.base import Mixer
from weirdnet.layers.weird import WeirdAttention
from weirdnet.ops import checks, cpool
from weirdnet.ops.weird_scan import cpu as cpu_kernels
from weirdnet.ops.weird_scan import op
from weirdnet.ops.weird_scan import pytorch as torch_kernels

ROOT = os.path.dirname(weirdnet.__file__)
MAX_FRAMES = 7


def own_frames(call, target) -> list[str]:
    """weirdnet's frames from Mixer.forward to the first call of code ``target``."""
    found: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is target and not found:
            stack = []
            while frame is not None:
                stack.append(frame)
                frame = frame.f_back
            stack.reverse()
            start = next(i for i, f in enumerate(stack) if f.f_code is Mixer.forward.__code__)
            found.extend(f"{os.path.relpath(f.f_code.co_filename, ROOT)}:{f.f_code.co_name}"
                         for f in stack[start:] if f.f_code.co_filename.startswith(ROOT))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    assert found, "the kernel was not reached"
    return found


BACKENDS = [("torch", torch_kernels.fwd.__code__)]
if cpu_kernels.available():
    BACKENDS.append(("cpu", cpool.run_units.__code__))


@pytest.mark.parametrize("backend, target", BACKENDS, ids=[b for b, _ in BACKENDS])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
def test_at_most_seven_frames_from_the_mixer_to_the_kernel(monkeypatch, backend, target,
                                                         causal, packed):
    monkeypatch.setenv("WEIRDNET_SCAN_BACKEND", backend)
    layer = WeirdAttention(8, causal=causal, max_len=32)
    x, mask = torch.randn(2, 7, 8), torch.ones(2, 7, dtype=torch.bool)
    doc_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1]] * 2) if packed else None
    frames = own_frames(lambda: layer(x, mask, doc_ids=doc_ids), target)
    assert len(frames) <= MAX_FRAMES, frames
    assert frames[0] == "layers/base.py:forward" and frames[-1].endswith(target.co_name)


def test_the_layer_checks_its_inputs_once(monkeypatch):
    """The mask is checked once on the layer path (by the mixer), and a mask on another
    device than x is refused there."""
    calls = []
    real = checks.check_mask

    def counting(*args, **kwargs):
        calls.append(args[1:3])
        return real(*args, **kwargs)

    monkeypatch.setattr("weirdnet.layers.base.check_mask", counting)
    monkeypatch.setattr(op, "check_scan_inputs", lambda *a: pytest.fail("checked twice"))
    layer = WeirdAttention(8, max_len=16)
    layer(torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.bool))
    assert calls == [(2, 5)]
    with pytest.raises(ValueError, match="mask must be on meta"):
        checks.check_mask(torch.ones(2, 5, dtype=torch.bool), 2, 5, device="meta")
