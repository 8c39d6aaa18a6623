"""Training, evaluation and their tools: ``weirdnet train|eval|generate|plot``.

- :mod:`weirdnet.train.config`: the run configuration (TOML files, ``--set`` overrides).
- :mod:`weirdnet.train.trainer`: the training loop (single process or torchrun).
- :mod:`weirdnet.train.setup`: what a run is built from: seeds, datasets, model,
  optimizer, autocast, activation checkpointing.
- :mod:`weirdnet.train.evaluation`: a model's metrics on a split, over all ranks.
- :mod:`weirdnet.train.trained_eval`: the evaluation entry point for code built on
  weirdnet: a trained LM's bits per byte by context length, and its truncation test.
- :mod:`weirdnet.train.weights`: a trained model's weights into a new one
  (``train.init_from``), checked tensor by tensor.
- :mod:`weirdnet.train.intervals`: Student's t intervals on a mean.
- :mod:`weirdnet.train.tasks`: per task (lm, classification, retrieval, seq2seq) the model,
  the loss of a batch and the evaluation metrics.
- :mod:`weirdnet.train.plot`: learning curves from a run's ``log.jsonl``.
"""

import importlib

_PUBLIC = {
    "config": ("TrainConfig", "check", "eval_due"),
    "trainer": ("Trainer",),
    "intervals": ("Z95", "mean_interval", "t95"),
    "plot": ("read_log",),
    "named_configs": ("config_dir",),
    "positions": ("short_bytes", "span_label", "truncation_rows"),
    "trained_eval": ("evaluate_trained",),
    "setup": ("enable_activation_checkpointing", "make_optimizer"),
    "weirdnet.run.checkpoint": ("TRAIN_CONFIG", "list_checkpoints"),
}
"""The names code built on weirdnet takes from ``weirdnet.train``, by the module that
defines each (of this package, or named in full); imported on first use
(``import weirdnet.train`` stays cheap: no torch)."""
_HOME = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _HOME[name]
    module = module if module.startswith("weirdnet.") else f"{__name__}.{module}"
    return getattr(importlib.import_module(module), name)
