"""The byte tokenizer of weirdnet's byte-level models, built with ``tokenizers``.

Token id = byte value (0-255) of the UTF-8 text, exactly as weirdnet's byte datasets feed
their models, so a model trained by ``weirdnet train`` reads what this tokenizer writes.
The special tokens are bytes inside the 256-entry vocabulary (no id is added beyond the
embedding): pad = NUL (0), bos = STX (2, start of text), eos = ETX (3, end of text); the
control characters themselves in a text map to the same ids.

Every other byte has the usual byte-level token string (the printable character for a
printable byte, a stand-in letter otherwise, as in GPT-2), and the byte-level decoder turns
ids back into UTF-8 text (invalid sequences become U+FFFD).
"""

from __future__ import annotations

import os
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .configuration import BOS_ID, EOS_ID, PAD_ID

SPECIAL_BYTES = {PAD_ID: "pad_token", BOS_ID: "bos_token", EOS_ID: "eos_token"}


def byte_to_token() -> dict[int, str]:
    """The byte-level token string of every byte: printable Latin-1 bytes stand for
    themselves; the others are numbered from U+0100 up, in byte order (the byte-to-unicode
    table of GPT-2's byte-level BPE, which ``tokenizers``' ``ByteLevel`` uses)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1),
                 *range(0xAE, 0xFF + 1)}
    table, stand_in = {}, 0x100
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(stand_in)
            stand_in += 1
    return table


def byte_tokenizer(max_length: int | None = None) -> PreTrainedTokenizerFast:
    """A ``transformers`` fast tokenizer: id = byte value, 256 ids, special tokens inside;
    ``max_length``: the model's longest sequence (``model_max_length``), if known.

    ``save_pretrained(DIR)`` writes ``tokenizer.json`` and its config, so
    ``AutoTokenizer.from_pretrained(DIR)`` loads it offline."""
    specials = {byte: chr(byte) for byte in SPECIAL_BYTES}  # the control character itself
    vocab = {specials.get(byte, token): byte for byte, token in byte_to_token().items()}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # no merges: one token per byte
    core.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(text, special=True, normalized=False)
                             for text in specials.values()])
    names = {name: specials[byte] for byte, name in SPECIAL_BYTES.items()}
    limits = {} if max_length is None else {"model_max_length": max_length}
    return PreTrainedTokenizerFast(tokenizer_object=core, clean_up_tokenization_spaces=False,
                                   **limits, **names)


def load_tokenizer(folder: str | os.PathLike) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained(folder)`` with a clear error when the folder has no
    tokenizer (``transformers`` would say it cannot build a backend tokenizer)."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json: export the model with "
                                "`weirdnet export-hf`, or use weirdnet.hf.byte_tokenizer() "
                                "(id = byte value) for a byte-level weirdnet model")
    return AutoTokenizer.from_pretrained(folder)
