"""``weirdnet bench context-parallel``: training steps of one sequence sharded over P
processes (issue 64): :mod:`.command` (the command line), :mod:`.worker` (one torchrun
rank), :mod:`.report` (the JSON record, the Markdown table and the plot)."""
