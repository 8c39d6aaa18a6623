"""The settings of ``weirdnet bench recall`` that its command and its reports share (one
module that they all import, so none imports another's command)."""

DIAGNOSTICS = ("mqar", "selective-copy", "induction")
DEFAULT_LR = 3e-3
"""The learning rate of a cell unless ``--lrs`` says otherwise (a cell at another rate
has ``--lr<rate>`` in its key)."""
TEST_SEQUENCES = 1000
"""Sequences in the validation and test splits."""


def diagnostic_options(diagnostic: str, length: int) -> dict[str, int]:
    """The generator options of ``diagnostic`` at sequence length ``length``: MQAR asks
    length / 16 keys (vocabulary 64), selective copying copies 8 tokens (vocabulary 16),
    induction uses vocabulary 16."""
    if diagnostic == "mqar":
        return {"seq_len": length, "num_pairs": max(1, length // 16), "vocab_size": 64}
    if diagnostic == "selective-copy":
        return {"seq_len": length, "num_tokens": 8, "vocab_size": 16}
    if diagnostic == "induction":
        return {"seq_len": length, "vocab_size": 16}
    raise ValueError(f"unknown diagnostic {diagnostic!r}; known: {', '.join(DIAGNOSTICS)}")
