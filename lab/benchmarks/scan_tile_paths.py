"""How often the two-pass GPU scan's tiles must take path A (issue 73, docs/design.md §19).

    python lab/benchmarks/scan_tile_paths.py [--run runs/quickstart] [--lengths 1024 16384 65536]
        [--out lab/results/scan_tile_paths_cpu.md]

The scan inputs (A, V, log_w) of every Weird-attention layer of two models on the bytes of
the local Python standard library (the quick-start's corpus: its *.py files in sorted
order, test code left out, the 90-95% byte range, the validation split's):

* "default init": the run's model config with max_len = L, freshly initialised (seed 0)
  (so log_w has all K levels at their initialisation), run on consecutive windows of
  1,024 bytes (its softmax layers are quadratic) whose A and V are laid end to end into
  one sequence of L;
* "trained": the run's ``best/`` model, the same way on windows of its max_len.  Its
  log_w has the levels of max_len only; the levels above are continued as the model's
  parameterisation would start them (log_w = cumsum(w), w ~ N(0, 1), seed 0) -- an
  assumption, stated in the record.

Tiles as the Triton design of docs/design.md §19 uses them (K = levels of L):
* L <= 1024: one pass, a tile is a whole column (all L rows, all K levels);
* L > 1024: the fine pass, levels 0 .. c1 - 1 with c1 = K - 9, on tiles of 256 rows plus
  a halo of 2^c1 - 1 rows; the coarse pass, levels c1 .. K - 1, on whole columns of
  L / 2^c1 rows (one residue mod 2^c1), whose inputs are the fine pass's states
  (their log U and O = H / U, from the PyTorch backend's path-A levels).
A tile takes A where ``weirdnet.ops.weird_scan.tiles.spread`` exceeds its limit (126
binades in float32); the rate is given per tile of one channel and per program of 16
channels (a program falls back when any of its channels does).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import sysconfig
from pathlib import Path

import torch

from weirdnet.layers.weird import WeirdAttention
from weirdnet.models import load
from weirdnet.ops import levels_needed
from weirdnet.ops.weird_scan import tiles
from weirdnet.ops.weird_scan.pytorch import apply_level, initial_state, level_weights
from weirdnet_lab.harness.machine import cpu_model

FINE_ROWS = 256
SINGLE_PASS = 1024
PROGRAM_CHANNELS = 16


def corpus(n: int) -> torch.Tensor:
    """n bytes from the 90% mark of the standard library's sources (int64, (n,))."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if not any(part in ("test", "tests", "idle_test", "site-packages",
                                       "__pycache__") or part.startswith("test_")
                              for part in p.relative_to(root).parts))
    data = b"".join(p.read_bytes() for p in files)
    start = int(len(data) * 0.9)
    return torch.tensor(list(data[start:start + n]), dtype=torch.int64)


def scan_inputs(model, tokens: torch.Tensor):
    """[(a, v, log_w)] of every Weird-attention layer for ``tokens`` (B, L)."""
    found = []
    hooks = []
    for module in model.modules():
        if isinstance(module, WeirdAttention):
            entry = {"log_w": module.log_weights().detach()}
            found.append(entry)
            hooks.append(module.proj_a.register_forward_hook(
                lambda _m, _i, out, e=entry: e.__setitem__("a", out.detach())))
            hooks.append(module.proj_v.register_forward_hook(
                lambda _m, _i, out, e=entry: e.__setitem__("v", out.detach())))
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()
    return [(e["a"], e["v"], e["log_w"]) for e in found]


def extended(log_w: torch.Tensor, K: int) -> torch.Tensor:
    """log_w with levels up to K: cumsum continued with w ~ N(0, 1) (seed 0)."""
    if log_w.shape[0] >= K:
        return log_w[:K]
    g = torch.Generator().manual_seed(0)
    w = torch.randn(K - log_w.shape[0], log_w.shape[1], generator=g)
    return torch.cat([log_w, log_w[-1] + w.cumsum(0)])


def _columns(x: torch.Tensor) -> torch.Tensor:
    """(1, L, D) -> (D, L)."""
    return x[0].T.contiguous()


def _rates(took_a: torch.Tensor) -> tuple[float, float]:
    """(per tile, per program of 16 channels) from took_a (D, tiles)."""
    D = took_a.shape[0]
    groups = took_a[: D // PROGRAM_CHANNELS * PROGRAM_CHANNELS]
    programs = groups.reshape(-1, PROGRAM_CHANNELS, took_a.shape[1]).any(1)
    return took_a.float().mean().item(), programs.float().mean().item()


def _spread_rows(a, v, n) -> torch.Tensor:
    """Spread of tiles a, v (D, T, R) with level exponents n (K, D): (D, T)."""
    D, T, R = a.shape
    nn = n.repeat_interleave(T, 1).unsqueeze(-1)  # (K, D T, 1)
    return tiles.spread(a.reshape(D * T, R), v.reshape(D * T, R), nn).reshape(D, T)


def single_pass(a, v, log_w) -> torch.Tensor:
    n, _ = level_weights(log_w)
    cols = _columns(a).unsqueeze(1), _columns(v).unsqueeze(1)
    return _spread_rows(*cols, n) > tiles.limit(a.dtype)


def fine_pass(a, v, log_w, c1: int) -> torch.Tensor:
    """took_a (D, L / 256) of the fine tiles (256 rows and the halo before them)."""
    halo = (1 << c1) - 1
    n, _ = level_weights(log_w[:c1])
    ca, cv = _columns(a), _columns(v)
    L = ca.shape[1]
    pad = lambda x: torch.cat([x[:, :1].expand(-1, halo), x], 1)  # noqa: E731  (first tile: its own rows)
    pa, pv = pad(ca), pad(cv)
    starts = range(0, L, FINE_ROWS)
    ta = torch.stack([pa[:, s:s + FINE_ROWS + halo] for s in starts], 1)
    tv = torch.stack([pv[:, s:s + FINE_ROWS + halo] for s in starts], 1)
    return _spread_rows(ta, tv, n) > tiles.limit(a.dtype)


def coarse_pass(a, v, log_w, c1: int) -> torch.Tensor:
    """took_a (D, 2^c1) of the coarse columns, from the fine pass's states."""
    n, f = level_weights(log_w[:c1])
    state = initial_state(a, v, None)
    for k in range(c1):
        state = apply_level(state, 1 << k, (n[k], f[k]))
    m, h, u = (_columns(x).double() for x in state)
    log_u = (m + torch.log2(u)) * math.log(2.0)  # natural log U: its binade is n_A's
    o = h / u
    stride = 1 << c1
    D, L = m.shape
    ca = log_u.reshape(D, L // stride, stride).transpose(1, 2)  # (D, residue, N)
    cv = o.reshape(D, L // stride, stride).transpose(1, 2)
    high, _ = level_weights(log_w[c1:].double())
    return _spread_rows(ca, cv, high) > tiles.limit(a.dtype)


def rates(a, v, log_w, L: int) -> dict:
    K = levels_needed(L)
    if L <= SINGLE_PASS:
        return {"single": _rates(single_pass(a, v, log_w[:K]))}
    c1 = K - 9
    return {"fine": _rates(fine_pass(a, v, log_w, c1)),
            "coarse": _rates(coarse_pass(a, v, log_w, c1))}


def measure(model, tokens, L: int) -> list[dict]:
    """Rates per Weird-attention layer; tokens (windows, W), laid end to end to L."""
    out = []
    for a, v, log_w in scan_inputs(model, tokens):
        a, v = (x.reshape(1, -1, x.shape[-1])[:, :L] for x in (a, v))
        out.append(rates(a, v, extended(log_w, levels_needed(L)), L))
    return out


def _mean(rows: list[dict], key: str, i: int) -> float:
    return sum(r[key][i] for r in rows) / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/quickstart")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 16384, 65536])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trained = load(Path(args.run) / "best").eval()
    cfg = trained.config
    window = cfg.backbone.max_len
    lines = []
    for L in args.lengths:
        torch.manual_seed(0)
        fresh_cfg = type(cfg)(**{**cfg.__dict__,
                                 "backbone": type(cfg.backbone)(**{**cfg.backbone.__dict__,
                                                                   "max_len": L})})
        fresh = type(trained)(fresh_cfg).eval()
        text = corpus(L)
        for name, model, width in (("default init", fresh, min(L, SINGLE_PASS)),
                                   ("trained", trained, window)):
            rows = measure(model, text[: L // width * width].reshape(-1, width), L)
            for key in rows[0]:
                lines.append(f"| {L} | {name} | {key} | {100 * _mean(rows, key, 0):.1f}% | "
                             f"{100 * _mean(rows, key, 1):.1f}% | "
                             + ", ".join(f"{100 * r[key][0]:.1f}" for r in rows) + " |")
            print(lines[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = [
        "# Scan tiles that take path A (issue 73)",
        "",
        f"- command: `python lab/benchmarks/{Path(__file__).name} --run {args.run} "
        f"--lengths {' '.join(map(str, args.lengths))}`",
        f"- machine: {cpu_model()}, 1 thread; torch {torch.__version__}; commit {commit}; "
        f"Python {sys.version.split()[0]}",
        f"- models: `{args.run}/best` (trained, max_len {window}) and its config freshly "
        "initialised (seed 0) with max_len = L; inputs: bytes of the standard library's "
        "sources from the 90% mark (the validation split's range), run in windows (the "
        f"trained model's {window}, the fresh one's 1,024) whose A and V are laid end to "
        "end",
        f"- trained log_w has {levels_needed(window)} levels; the levels above continue "
        "cumsum(w) with w ~ N(0, 1) (seed 0): an assumption, not trained values",
        "- tiles: L <= 1024 one pass over whole columns; above, the fine pass on 256 rows "
        "plus the 2^c1 - 1 halo (c1 = K - 9 levels) and the coarse pass on whole columns "
        "of L / 2^c1 rows (the fine pass's log U and O as inputs); path A where "
        f"`tiles.spread` > {tiles.limit(torch.float32)} binades (float32)",
        "",
        "| L | model | pass | tiles taking A | programs (16 channels) taking A "
        "| per layer (% tiles) |",
        "|---|---|---|---|---|---|",
    ]
    text_out = "\n".join(head + lines) + "\n"
    if args.out:
        Path(args.out).write_text(text_out, encoding="utf-8")
    print(text_out)


if __name__ == "__main__":
    main()
