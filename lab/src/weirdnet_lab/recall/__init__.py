"""``weirdnet bench recall``: the recall diagnostics against width (:mod:`.command`), and
its report (:mod:`.report`)."""
