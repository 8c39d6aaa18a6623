"""``weirdnet bench lm``: byte-level language models at equal CPU-minutes and at equal
steps (:mod:`.command`), and its report from the stored records (:mod:`.report`)."""
