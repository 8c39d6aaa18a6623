"""Training, evaluation and their tools: ``weirdnet train|eval|generate|plot``.

- :mod:`weirdnet.train.config`: the run configuration (TOML files, ``--set`` overrides).
- :mod:`weirdnet.train.trainer`: the training loop (single process or torchrun).
- :mod:`weirdnet.train.setup`: what a run is built from: seeds, datasets, model,
  optimizer, autocast, activation checkpointing.
- :mod:`weirdnet.train.evaluation`: a model's metrics on a split, over all ranks.
- :mod:`weirdnet.train.evaluate_trained`: the evaluation entry point for code built on
  weirdnet: a trained LM's bits per byte by context length, and its truncation test.
- :mod:`weirdnet.train.weights`: a trained model's weights into a new one
  (``train.init_from``), checked tensor by tensor.
- :mod:`weirdnet.train.checkpoint`: atomic checkpoints, resume, fallback on corruption.
- :mod:`weirdnet.train.tasks`: per task (lm, classification, retrieval, seq2seq) the model,
  the loss of a batch and the evaluation metrics.
- :mod:`weirdnet.train.plot`: learning curves from a run's ``log.jsonl``.
"""
