"""safetensors files (the ``safetensors`` library writes and reads the format; no pickle),
with a checksum.

Layout: an 8-byte little-endian header size N, a JSON header of N bytes mapping each name
to ``{"dtype", "shape", "data_offsets"}`` plus an optional ``"__metadata__"`` of strings,
then the raw data.  We add the SHA-256 of the data section to the metadata
(``weirdnet.sha256``) and check it on load, so a flipped byte is an error rather than
silently wrong weights; :func:`add_checksum` adds it to a file another writer made (a
Hugging Face export) and :func:`verify_file` checks a file before another reader loads
it.  Every damage (short, truncated, bad JSON, bad entry, checksum) is a
:class:`SafetensorsError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as _decode
from safetensors.torch import save as _encode

from weirdnet.run.files import write_atomic

_CHECKSUM_KEY = "weirdnet.sha256"
_MAX_HEADER = 100 * 2**20


class SafetensorsError(ValueError):
    """A file that is not valid safetensors, is truncated, or fails its checksum."""


def save_file(tensors: dict[str, torch.Tensor], path: str | os.PathLike,
              metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (any device; tied ones as separate copies) to ``path`` with the
    checksum of their data, atomically (a temporary file, then a rename)."""
    raw = _encode(_separate(tensors), metadata=dict(metadata or {}))
    header, start = read_header(raw, str(path))
    write_atomic(path, _with_checksum(header, memoryview(raw)[start:]))


def _separate(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU tensors, none sharing memory with another (the library refuses
    shared ones: tied weights are written once per name, as they are read back)."""
    out, seen = {}, set()
    for name, tensor in tensors.items():
        flat = tensor.detach().to("cpu").contiguous()
        key = flat.untyped_storage().data_ptr()
        out[name] = flat.clone() if flat.numel() and key in seen else flat
        seen.add(key)
    return out


def _with_checksum(header: dict, data: memoryview) -> list:
    """The file's pieces (size field, JSON header padded with spaces so the data stays
    8-aligned, data) with the SHA-256 of ``data`` in the header's metadata."""
    meta = dict(header.get("__metadata__") or {})
    meta[_CHECKSUM_KEY] = hashlib.sha256(data).hexdigest()
    header = {**header, "__metadata__": meta}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return [struct.pack("<Q", len(text)), text, data]


def add_checksum(path: str | os.PathLike) -> None:
    """Store the SHA-256 of the data section of the safetensors file ``path`` in its
    metadata, as :func:`save_file` does (for a file another library wrote); the tensors
    and their bytes are unchanged.  The file is rewritten atomically."""
    raw = Path(path).read_bytes()
    header, start = read_header(raw, str(path))
    write_atomic(path, _with_checksum(header, memoryview(raw)[start:]))


def verify_file(path: str | os.PathLike) -> bool:
    """Check the data section of ``path`` against its stored SHA-256, reading it in blocks:
    SafetensorsError (naming the file) on a mismatch; False when the file stores no
    digest (written before weirdnet stored one, or by another tool), True when it
    matches."""
    path = str(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        size = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        header, _ = read_header(head + handle.read(min(size, _MAX_HEADER)), path)
        expected = (header.get("__metadata__") or {}).get(_CHECKSUM_KEY)
        if expected is None:
            return False
        digest = hashlib.sha256()
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise SafetensorsError(_mismatch(path))
    return True


def _mismatch(path: str) -> str:
    return (f"{path}: checksum mismatch; the file is corrupted (or was modified after it was "
            "written)")


def read_header(raw: bytes, path: str) -> tuple[dict, int]:
    """The parsed JSON header and the offset where the data section starts."""
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: {len(raw)} bytes is too short for a safetensors file")
    (size,) = struct.unpack("<Q", raw[:8])
    if size > min(_MAX_HEADER, len(raw) - 8):
        raise SafetensorsError(f"{path}: header size {size} does not fit in the file "
                               f"({len(raw)} bytes); the file is truncated or not safetensors")
    try:
        header = json.loads(raw[8:8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SafetensorsError(f"{path}: the header is not valid JSON ({error})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is not a JSON object")
    return header, 8 + size


def load_file(path: str | os.PathLike, device: str | torch.device = "cpu"
              ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` from a safetensors file (tensors in name order), the
    checksum (when present) and every entry verified."""
    path = str(path)
    raw = Path(path).read_bytes()
    header, start = read_header(raw, path)
    metadata = header.get("__metadata__") or {}
    expected = metadata.get(_CHECKSUM_KEY)
    if expected is not None and hashlib.sha256(memoryview(raw)[start:]).hexdigest() != expected:
        raise SafetensorsError(_mismatch(path))
    try:
        tensors = _decode(raw)
    except (SafetensorError, ValueError, TypeError) as error:
        raise SafetensorsError(f"{path}: {error}; the file is truncated or corrupted") from None
    return {name: tensors[name].to(device) for name in sorted(tensors)}, metadata
