"""The papers' experiments, rerun side by side (``weirdnet bench suite``): an application
built on the library (``ops`` -> ``layers`` -> ``models`` -> ``data`` / ``train``), kept
apart from it because it holds the papers' reported numbers and their claims.

- :mod:`.variants`: the mechanisms and ablation variants (what changes in the model);
- :mod:`.tasks`: the tasks and the config file each one starts from;
- :mod:`.budgets`: smoke / cpu / gpu / paper: sizes and steps per task;
- :mod:`.cells`: one (task, variant, seed) training run, its config and its stored result;
- :mod:`.child`: runs one cell in a fresh process and measures speed and memory;
- :mod:`.numbers`: the numbers the papers report (never ours);
- :mod:`.report`: the Markdown tables and the claim checks; :mod:`.figure`: Fig. 6;
- :mod:`.command`: the command line.
"""
