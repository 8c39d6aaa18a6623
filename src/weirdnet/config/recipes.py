"""Named sets of backbone options, kept free of torch so that the command line and the
lab can read them without importing it (:mod:`weirdnet.models.presets` builds on them)."""

TRANSFORMERPP = {"positions": "rope", "norm": "rmsnorm", "activation": "swiglu",
                 "bias": False}
"""The backbone options of a Transformer++ (Llama's blocks; fla's ``transformer``, mamba's
``transformerpp``): rotary positions, RMSNorm, a SwiGLU FFN, no biases."""
