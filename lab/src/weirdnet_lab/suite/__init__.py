"""The papers' experiments, rerun side by side (``weirdnet bench suite``), with the
papers' reported numbers and their claims.

- :mod:`.tasks`: the tasks and the config file each one starts from;
- :mod:`.budgets`: smoke / laptop / cpu / gpu / paper: sizes and steps per task;
- :mod:`.plan` and :mod:`.cells`: which (task, variant, seed) cells a table needs, and each
  one's training config;
- :mod:`.numbers`: the numbers the papers report (never ours);
  :mod:`weirdnet_lab.sweep.baselines`: what a model that ignores its input scores;
- :mod:`.report`, :mod:`.document`, :mod:`.claims`, :mod:`.figure`: the Markdown tables,
  the claim checks and Fig. 6;
- :mod:`.command`: the command line.

The cells run through the sweep engine (:mod:`weirdnet_lab.sweep`); the models come from
:mod:`weirdnet_lab.variants`.
"""
