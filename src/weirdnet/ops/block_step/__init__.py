"""The fused decoding step of a pre-norm Weird-attention block: one package, the
reference beside the kernel.

    weights.py    BlockWeights: the tensors the step reads, checked once
    reference.py  the step in plain PyTorch ops (the specification)
    cpu.py        the fused C step of csrc/ (built on first use, called through ctypes)

At decoding widths every separate PyTorch op costs more in dispatch than in arithmetic;
the fused step does a whole block (two LayerNorms, five matrix-vector products, the
activation and the scan's own decoding step) in one call.  ``Backbone.step`` uses it,
through ``weirdnet.models.decoding.fused_decode``, for every block whose mixer offers one
(``Mixer.scan_step``) when decoding on CPU without autograd.
"""

from .cpu import BlockStep, unavailable_reason
from .reference import block_step_reference
from .weights import ACTIVATIONS, BlockWeights, ScanMixerWeights

__all__ = ["ACTIVATIONS", "BlockStep", "BlockWeights", "ScanMixerWeights",
           "block_step_reference", "unavailable_reason"]
