"""Reading and writing the safetensors format with torch alone (no pickle).

Layout: an 8-byte little-endian header size N, a JSON header of N bytes mapping each name
to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the data section)
plus an optional ``"__metadata__"`` of strings, then the raw little-endian data.  Files
written here are readable by the ``safetensors`` package and vice versa.  We add the
SHA-256 of the data section to the metadata (``weirdnet.sha256``) and check it on load, so
a flipped byte is an error rather than silently wrong weights; :func:`add_checksum` adds it
to a file another writer made (a Hugging Face export) and :func:`verify_file` checks a file
before another reader loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import torch

from weirdnet._atomic import write_atomic

DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_BY_NAME = {name: dtype for dtype, name in DTYPES.items()}
_CHECKSUM_KEY = "weirdnet.sha256"
_MAX_HEADER = 100 * 2**20


class SafetensorsError(ValueError):
    """A file that is not valid safetensors, is truncated, or fails its checksum."""


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def save_file(tensors: dict[str, torch.Tensor], path: str | os.PathLike,
              metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` atomically (a temporary file, then a rename)."""
    header: dict = {}
    chunks, offset = [], 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.dtype not in DTYPES:
            raise TypeError(f"{name}: dtype {tensor.dtype} has no safetensors code")
        data = _tensor_bytes(tensor)
        header[name] = {"dtype": DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    meta = dict(metadata or {})
    meta[_CHECKSUM_KEY] = digest.hexdigest()
    header["__metadata__"] = meta
    write_atomic(path, [*_pack_header(header), *chunks])


def _pack_header(header: dict) -> list[bytes]:
    """The size field and the JSON header, padded with spaces so the data is 8-aligned."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return [struct.pack("<Q", len(text)), text]


def add_checksum(path: str | os.PathLike) -> None:
    """Store the SHA-256 of the data section of the safetensors file ``path`` in its
    metadata, as :func:`save_file` does (for a file another library wrote); the tensors
    and their bytes are unchanged.  The file is rewritten atomically."""
    raw = Path(path).read_bytes()
    header, start = read_header(raw, str(path))
    data = memoryview(raw)[start:]
    meta = dict(header.get("__metadata__") or {})
    meta[_CHECKSUM_KEY] = hashlib.sha256(data).hexdigest()
    header["__metadata__"] = meta
    write_atomic(path, [*_pack_header(header), data])


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
    """``(tensors, metadata)`` from a safetensors file, every entry and the checksum
    (when present) verified."""
    path = str(path)
    raw = Path(path).read_bytes()
    header, start = read_header(raw, path)
    metadata = header.pop("__metadata__", None) or {}
    data = raw[start:]
    expected = metadata.get(_CHECKSUM_KEY)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise SafetensorsError(_mismatch(path))
    buffer = bytearray(data)
    tensors = {name: _entry(name, spec, buffer, path).to(device)
               for name, spec in header.items()}
    return tensors, metadata


def _entry(name: str, spec, buffer: bytearray, path: str) -> torch.Tensor:
    try:
        dtype = _BY_NAME[spec["dtype"]]
        shape = [int(n) for n in spec["shape"]]
        begin, end = (int(n) for n in spec["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise SafetensorsError(f"{path}: malformed header entry for {name!r}: {spec!r}") from None
    count = 1
    for n in shape:
        count *= n
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not 0 <= begin <= end <= len(buffer) or end - begin != count * itemsize:
        raise SafetensorsError(f"{path}: entry {name!r} has offsets [{begin}, {end}) that do "
                               f"not match its shape {shape} and dtype {spec['dtype']} within "
                               f"{len(buffer)} data bytes; the file is truncated or corrupted")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(buffer, dtype=torch.uint8, count=end - begin, offset=begin)
    return flat.view(dtype).reshape(shape).clone()
