"""Training, evaluation and their tools: ``weirdnet train|eval|generate|plot``.

- :mod:`weirdnet.train.config`: the run configuration (TOML files, ``--set`` overrides).
- :mod:`weirdnet.train.trainer`: the training loop (single process or torchrun).
- :mod:`weirdnet.train.checkpoint`: atomic checkpoints, resume, fallback on corruption.
- :mod:`weirdnet.train.tasks`: per task (lm, classification, retrieval, seq2seq) the model,
  the loss of a batch and the evaluation metrics.
- :mod:`weirdnet.train.plot`: learning curves from a run's ``log.jsonl``.
"""
