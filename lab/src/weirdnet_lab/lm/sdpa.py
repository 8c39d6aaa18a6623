"""The SDPA backend the Transformer++ of ``weirdnet bench lm`` gets on CUDA.

``bench lm`` trains through weirdnet's trainer, whose ``train.precision = "auto"`` is
bfloat16 autocast on a GPU that has it (float32 on a CPU).  Before a CUDA run trains, one
forward and backward of the matched Transformer++ at each context, in that autocast,
records the backend PyTorch picks for each attention call
(:class:`weirdnet_lab.gpu.sdpa.SDPARecorder`) into ``sdpa_cuda.json`` in the results
folder; the report names it and flags a context where it is not FlashAttention or cuDNN
(the comparison would then be against a slower Transformer than a GPU user runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILE = "sdpa_cuda.json"
REFERENCE = "transformerpp"


def probe(table: dict[str, Any], contexts: list[int], device) -> dict[str, Any]:
    """{"device", "precision", "backends": {context: backend or None}} of the model of
    ``table`` (a ``model`` table) on ``device``: one bf16-autocast training step at
    batch 1 per context."""
    import torch

    from weirdnet_lab import matching
    from weirdnet_lab.gpu.sdpa import SDPARecorder, backends_text

    model = matching.build(table, max_len=max(contexts)).to(device)
    backends = {}
    for context in contexts:
        tokens = torch.randint(0, 256, (1, context + 1), device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16), SDPARecorder() as recorder:
            model(tokens[:, :-1], tokens[:, 1:]).loss.backward()
        backends[str(context)] = backends_text(recorder.backends)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {"device": name, "precision": "bf16 autocast",
            "backends": backends}


def record_if_cuda(results_dir: Path, names: list[str], contexts: list[int]) -> None:
    """On CUDA, when the Transformer++ is among ``names``: :func:`probe` it and write
    :data:`FILE` (its contexts merged over those recorded before)."""
    import torch

    from weirdnet.run import write_atomic
    from weirdnet_lab.lm.models import model_table

    if REFERENCE not in names or not torch.cuda.is_available():
        return
    found = probe(model_table(REFERENCE)[0], contexts, torch.device("cuda"))
    before = read(results_dir) or {}
    found["backends"] = {**before.get("backends", {}), **found["backends"]}
    results_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(results_dir / FILE, json.dumps(found, indent=2) + "\n")


def read(results_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(results_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def report_lines(results_dir: Path) -> list[str]:
    """The report's lines on precision and the Transformer++'s SDPA backend."""
    from weirdnet_lab.gpu.sdpa import unfair

    lines = ["Precision: on CUDA every model trains in bf16 autocast (`train.precision = "
             "\"auto\"`), on a CPU in float32."]
    found = read(results_dir)
    if found:
        backends = found.get("backends", {})
        lines.append(f"SDPA backend of the Transformer++ on {found.get('device')} "
                     f"({found.get('precision')}): " + ", ".join(
                         f"{b or 'no SDPA call'} at L = {c}" for c, b in backends.items())
                     + ".")
        bad = [c for c, b in backends.items() if unfair(b)]
        if bad:
            lines.append(f"**Not a fair GPU comparison at L = {', '.join(bad)}**: the "
                         "Transformer++ ran neither FlashAttention nor cuDNN there.")
    return lines
