"""One rank of a context-parallel benchmark cell, run under ``torchrun`` (gloo, one thread).

    python -m torch.distributed.run --standalone --nproc-per-node P \
        -m weirdnet_lab.context_parallel.worker SPEC_JSON OUT_PREFIX

SPEC: {"model": "weird-a" | "weird-b-pp", "length": L (bytes), "halos": "keep" |
"resend" (the sharded scan's, ``ContextParallel.halos``), "recompute_exchanges": bool
(``ContextParallel.recompute_exchanges``), "steps": timed steps,
"dim", "depth", "ffn_chunk"}.  Each rank builds the same byte-level language model (seed
0, activation checkpointing per block, FFNs in checkpointed chunks), takes its contiguous
slice of one random sequence of L bytes (:func:`weirdnet.train.context_parallel.shard_batch`)
and runs 1 + ``steps`` training steps: forward, next-byte loss over the whole sequence
(this rank's token losses / L), backward, the gradients summed over the group in one
flat ``all_reduce`` (what DDP does over the context-parallel ranks), AdamW.  P = 1 is the
single-process model on its default backend (the C kernel on a CPU).

Writes ``OUT_PREFIX.<rank>.json``: the shard's length, the RSS before the first step
(model, optimizer and batch allocated), the peak RSS over all steps (``VmHWM``, glibc's
mmap threshold fixed at 1 MiB so freed large blocks go back to the system), each step's
seconds (rank 0 waits for the group at the end of a step), and the halo bytes this rank
sent in the first step (forward, backward and the halos a "resend" backward sends
again; :func:`weirdnet.ops.count_sent_bytes`
counts the scan's and the short convolution's point-to-point messages), the number of
Weird-attention layers and the scan's channels.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from weirdnet_lab.harness.alloc import return_freed_memory

MODELS = {
    "weird-a": ("Weird-Net A (no positions)", {"pattern": "A", "positions": "none"}),
    "weird-b-pp": ("Weird-Net B++", {"pattern": "B", "positions": "rope", "norm": "rmsnorm",
                                     "activation": "swiglu", "bias": False}),
}
"""Benchmark model: (label, backbone options beside the sizes)."""


def build_model(name: str, length: int, dim: int, depth: int):
    """The byte-level language model ``name`` (:data:`MODELS`), D = ``dim``, N = ``depth``,
    d_ff = 4 D, D / 32 heads, max_len = ``length``."""
    from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM

    backbone = BackboneConfig(dim=dim, depth=depth, d_ff=4 * dim, heads=max(1, dim // 32),
                              max_len=length, causal=True, vocab_size=256,
                              **MODELS[name][1])
    return WeirdNetLM(LMConfig(backbone=backbone))


def _step(model, opt, tokens, length: int, group_size: int) -> None:
    import torch
    import torch.distributed as dist

    from weirdnet.models import token_nll

    # the logits are not kept past the loss (the trainer's tasks do the same): the
    # backward needs only the cross-entropy's own saved tensors
    loss = token_nll(model(tokens[:, :-1]).logits, tokens[:, 1:]).sum() / length
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if group_size > 1:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
    opt.step()


def run(spec: dict, prefix: str) -> None:
    """This rank's part of one cell (module docstring); writes ``prefix.<rank>.json``."""
    allocator = return_freed_memory()
    import contextlib

    import torch
    import torch.distributed as dist

    from weirdnet.layers import WeirdAttention
    from weirdnet.ops import ContextParallel, count_sent_bytes
    from weirdnet.train.context_parallel import SequenceShards, check_shardable, shard_batch
    from weirdnet_lab.harness.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    P, rank = dist.get_world_size(), dist.get_rank()
    L = int(spec["length"])
    torch.manual_seed(0)
    model = build_model(spec["model"], L, spec["dim"], spec["depth"])
    model.backbone.set_activation_checkpointing("blocks", 2, spec["ffn_chunk"])
    shards = contextlib.nullcontext() if P == 1 else ContextParallel(
        halos=spec.get("halos", "resend"),
        recompute_exchanges=bool(spec.get("recompute_exchanges", False)))
    if P > 1:
        check_shardable(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 256, (1, L + 1), generator=torch.Generator().manual_seed(1))
    mine = shard_batch({"tokens": tokens}, SequenceShards(P, rank, None, None))["tokens"]
    del tokens
    dist.barrier()
    reset_peak_rss()
    base = current_rss_bytes()
    seconds, sent = [], None
    for i in range(1 + int(spec["steps"])):
        start = time.perf_counter()
        with count_sent_bytes() as counter, shards:
            _step(model, opt, mine, L, P)
        dist.barrier()
        seconds.append(time.perf_counter() - start)
        if i == 0:
            sent = counter
    weird = [m for m in model.modules() if isinstance(m, WeirdAttention)]
    result = dict(rank=rank, P=P, n=mine.shape[1] - 1, base_rss=base, peak_rss=peak_rss_bytes(),
                  seconds=seconds, sent_forward=sent.forward, sent_backward=sent.backward,
                  sent_recompute=sent.recompute,
                  sent_ring=sent.ring_forward + sent.ring_backward,
                  messages=sent.messages, weird_layers=len(weird), scan_channels=spec["dim"],
                  parameters=sum(p.numel() for p in model.parameters()), allocator=allocator)
    Path(f"{prefix}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]), sys.argv[2])
