"""``weirdnet bench decode``: tokens/s of cached generation against context length.

For every context length L and model preset (default: Weird-Net structure A and
structure B against an all-softmax model of the same size, the small CPU language-model
presets; the last model listed is the baseline of the ratios), a random prompt of L − n
tokens per sequence fills the caches (prefill, timed once), then n tokens are decoded one
at a time for a batch of B sequences (``--batch``, default 1); tokens/s = B / median step
time.  Alongside, the step time of a
single mixer layer with a cache of L tokens shows where the per-token cost goes: the
Weird layer's grows as log L (one partial sum per level), the softmax layer's as L (a
pass over the KV cache).  Weights are random (the speed does not depend on them) and
sampling is greedy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import positive

DEFAULT_MODELS = ("weirdnet-a-small-cpu", "weirdnet-small-cpu", "gpt2-small-cpu")
DEFAULT_CONTEXTS = (1024, 2048, 4096, 8192, 16384)
TARGET_CONTEXT = 16384
RATIO_TARGETS = {"weirdnet-small-cpu": 1.5, "weirdnet-a-small-cpu": 12.0}
"""Tokens/s of a model at least this many times the baseline's at TARGET_CONTEXT."""
SPEED_TARGETS = {"weirdnet-a-small-cpu": 4000.0}
"""Tokens/s at TARGET_CONTEXT, batch 1."""

HELP = "tokens/s of cached decoding vs context: Weird-Net A and B vs softmax"

DESCRIPTION = __doc__.split("\n\n", 1)[1] + """
Output: a Markdown table on stdout and in OUT/decode_<device>.md, raw numbers in
OUT/decode_<device>.json. OUT is --out DIR, else $WEIRDNET_BENCH_DIR, else
~/.cache/weirdnet/bench; the committed results are rewritten only with
--out lab/results, and never by a --quick run (unless --force). Target: at
L=16384 and batch 1, structure B reaches >= 1.5x and structure A >= 12x the tokens/s of
the all-softmax model, and structure A >= 4,000 tokens/s.

examples:
  weirdnet bench decode                          # into ~/.cache/weirdnet/bench
  weirdnet bench decode --out lab/results # the committed results
  weirdnet bench decode --contexts 1024 4096 --new-tokens 16
  weirdnet bench decode --quick                  # seconds-long smoke run
  weirdnet bench decode --models weird-a,weird-b,softmax,llama,mamba,mamba2,rwkv,transformerpp
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated causal LM presets, or bench lm models "
                             "(weird-a, transformerpp, llama, mamba, mamba2, rwkv, qwen3-next, "
                             "recurrent-gemma, xlstm; "
                             "parameter-matched at bench lm's sizes); the last is the "
                             "baseline of the ratios (default: %(default)s)")
    parser.add_argument("--contexts", type=positive, nargs="+", default=list(DEFAULT_CONTEXTS),
                        metavar="L", help="context lengths (default: %(default)s)")
    parser.add_argument("--new-tokens", type=positive, default=32, metavar="N",
                        help="tokens decoded per measurement (default: %(default)s)")
    parser.add_argument("--batch", type=positive, default=1, metavar="B",
                        help="sequences decoded together (default: %(default)s)")
    parser.add_argument("--threads", type=positive, default=None,
                        help="torch threads (default: all usable cores)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="each decoding step one CUDA graph replay (models that "
                             "weirdnet.models.decoding.graph_decode supports, e.g. Weird-Net "
                             "A; the others decode as usual; the report marks the rows; on a CPU "
                             "the same static step, eagerly)")
    parser.add_argument("--name", default="decode",
                        help="report files NAME_<device>.md and .json (default: %(default)s; "
                             "the committed long-context run: decode-long)")
    output.add_out_arguments(parser, "NAME_<device>.md and .json", quick="--quick")
    parser.add_argument("--quick", action="store_true",
                        help="seconds-long smoke run: contexts 256 512, 8 new tokens; "
                             "refuses a folder that holds a full run's report unless --force")
    parser.add_argument("--check-targets", action="store_true",
                        help="exit with status 1 when a measured target fails")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


PREFILL_CHUNK = 65536
"""Prompt tokens fed to the caches per call: a long prompt is prefilled chunk by chunk
(exact: a cache continues from where it stopped), so the activations of one call stay
bounded and only the caches grow with the context."""


def cache_bytes(cache) -> int:
    """Bytes of every tensor a decoding cache holds (its fields, recursively)."""
    import torch

    if isinstance(cache, torch.Tensor):
        return cache.numel() * cache.element_size()
    if isinstance(cache, list | tuple):
        return sum(cache_bytes(part) for part in cache)
    fields = getattr(cache, "__dict__", None)
    if fields is None:
        return 0
    return sum(cache_bytes(value) for key, value in fields.items() if key != "fused")


def _prefill(backbone, prompt, n: int, device):
    """(the cache for ``prompt`` (B, Lp) and n more tokens, the last hidden state, the
    prefill's seconds): the prompt fed in chunks of :data:`PREFILL_CHUNK`."""
    cache = backbone.init_cache(prompt.shape[0], prompt.shape[1] + n)
    start = time.perf_counter()
    for part in prompt.split(PREFILL_CHUNK, dim=1):
        hidden = backbone(part, cache=cache)[:, -1]
    _sync(device)
    return cache, hidden, time.perf_counter() - start


def _decode_steps(model, prompt, n: int, device) -> tuple[float, list[float], int]:
    """Prefill seconds, the n decode-step times (s) of greedy decoding of the (B, Lp)
    prompts, and the bytes the caches hold."""
    import torch

    backbone = model.backbone
    with torch.no_grad():
        cache, hidden, prefill = _prefill(backbone, prompt, n, device)
        steps = []
        for _ in range(n):
            start = time.perf_counter()
            token = model.logits(hidden).argmax(-1, keepdim=True)
            hidden = backbone.step(token[:, 0], cache)
            _sync(device)
            steps.append(time.perf_counter() - start)
    return prefill, steps, cache_bytes(cache.layers)


def _graph_decode_steps(model, prompt, n: int, device) -> tuple[float, list[float], int]:
    """As :func:`_decode_steps`, each step a replay of the CUDA graph of
    :class:`weirdnet.models.decoding.graph_decode.StaticStep` (on a CPU the same static step, run
    eagerly); the first step, which captures the graph, is not timed."""
    import torch

    from weirdnet.models.decoding.graph_decode import StaticStep

    with torch.no_grad():
        cache, hidden, prefill = _prefill(model.backbone, prompt, n, device)
        token = model.logits(hidden).argmax(-1)
        step = StaticStep(model.backbone, model.logits, cache, token,
                          capture=device.type == "cuda")
        logits, steps = step.logits, []
        for _ in range(n - 1):
            start = time.perf_counter()
            logits = step(logits.argmax(-1))
            _sync(device)
            steps.append(time.perf_counter() - start)
    return prefill, steps, cache_bytes(cache.layers)


def _peer_decode_steps(model, prompt, n: int, device) -> tuple[float, list[float], None]:
    """Prefill seconds and the n − 1 step times (s) of a ``transformers`` peer's own cached
    greedy ``generate``: the time from the call to the first token (prefill and that
    token), then between consecutive tokens (each step includes ``generate``'s own
    per-token work: logits processors and stopping checks)."""
    import torch
    import transformers

    stamps: list[float] = []

    class Stamp(transformers.StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            _sync(device)
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    model.check_cached_decoding()
    with torch.no_grad():
        start = time.perf_counter()
        model.peer.generate(prompt, attention_mask=torch.ones_like(prompt),
                            max_new_tokens=n, min_new_tokens=n, do_sample=False,
                            pad_token_id=0, stopping_criteria=[Stamp()])
    return stamps[0] - start, [b - a for a, b in zip(stamps, stamps[1:])], None


def _build(name: str, context: int, device):
    """A preset, or a ``bench lm`` model (a suite variant or a ``transformers`` peer,
    matched to the GPT-2-style Transformer's non-embedding parameters at bench lm's
    sizes), with max_len ``context``."""
    import torch

    from weirdnet.models import PRESETS, build_preset

    if name in PRESETS:
        return build_preset(name, device=device)
    from weirdnet_lab import matching
    from weirdnet_lab.lm.models import MODEL

    table = matching.matched_variant(name, MODEL)[0]
    with torch.device(device):
        return matching.build(table, max_len=context)


def _context_problem(name: str, context: int, new_tokens: int, max_len: int) -> str | None:
    """Why model ``name`` cannot decode ``new_tokens`` after ``context`` tokens in all
    (None: it can): the context must exceed the new tokens and fit its ``max_len``."""
    if new_tokens < context <= max_len:
        return None
    return (f"{name}: context {context} must exceed the {new_tokens} new tokens and stay "
            f"within its max_len={max_len}")


def _check_models(models: list[str], contexts: list[int], new_tokens: int) -> None:
    """BenchError (one line, status 2) for a name that is neither a preset nor a bench lm
    model, a model that cannot be matched, or a context that does not exceed the new
    tokens or exceeds a preset's max_len (a bench lm model is built for the context)."""
    from weirdnet.models import PRESETS, preset_config

    for name in models:
        if name in PRESETS:
            max_len = preset_config(name)["backbone"].get("max_len") or max(contexts)
            for L in contexts:
                problem = _context_problem(name, L, new_tokens, max_len)
                if problem:
                    raise output.BenchError(problem)
            continue
        if min(contexts) <= new_tokens:
            raise output.BenchError(f"{name}: context {min(contexts)} must exceed the "
                                    f"{new_tokens} new tokens")
        from weirdnet_lab import matching
        from weirdnet_lab.lm.models import MODEL

        try:
            matching.matched_variant(name, MODEL)
        except (ValueError, ImportError) as error:
            raise output.BenchError(f"--models {name}: {error} (presets: "
                                    f"{', '.join(PRESETS)})") from None


def _layer_step_us(mixer, context: int, device, batch: int, repeats: int = 20) -> float:
    """Median µs of one cached step of ``mixer`` (``batch`` sequences) at the end of
    ``context`` tokens."""
    import torch

    with torch.no_grad():  # the steps fill positions context - repeats + 1 ... context
        cache = mixer.init_cache(batch, context)
        for start in range(0, context - repeats, PREFILL_CHUNK):
            size = min(PREFILL_CHUNK, context - repeats - start)
            mixer(torch.randn(batch, size, mixer.dim, device=device), cache=cache)
        x = torch.randn(batch, mixer.dim, device=device)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            mixer.step(x, cache)
            _sync(device)
            times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def _mixer_of(model, name: str):
    from weirdnet.layers import factory

    cls = factory(name)
    return next((b.mixer for b in model.backbone.blocks if type(b.mixer) is cls), None)


def measure(model_name: str, context: int, new_tokens: int, device, batch: int = 1,
            cuda_graph: bool = False) -> dict:
    """One row: tokens/s, prefill time and speed, the caches' bytes, the peak memory of
    prefill and decoding, and per-layer step times at ``context``.  ``cuda_graph``: each
    step a CUDA graph replay where :func:`weirdnet.models.decoding.graph_decode.supported` allows
    (the row's ``cuda_graph`` says whether it did)."""
    import torch

    from weirdnet_lab.harness.memory import PeakMemory

    torch.manual_seed(0)
    model = _build(model_name, context, device).eval()
    problem = _context_problem(model_name, context, new_tokens, model.max_len)
    if problem:
        raise ValueError(problem)
    from weirdnet.models.decoding.graph_decode import supported

    peer = hasattr(model, "peer")
    graph = cuda_graph and not peer and supported(model.backbone) is None
    decode = _peer_decode_steps if peer else _graph_decode_steps if graph else _decode_steps
    vocab = model.config.backbone.vocab_size
    prompt = torch.randint(0, vocab, (batch, context - new_tokens), device=device)
    decode(model, prompt[:, :64], 4, device)  # warm-up
    meter = PeakMemory(device, since="the model and the prompt")
    meter.start()
    prefill, steps, held = decode(model, prompt, new_tokens, device)
    peak_mib = meter.peak_mib()[0]
    row = {"model": model_name, "context": context, "new_tokens": new_tokens,
           "batch": batch, "prefill_s": prefill,
           "prefill_tokens_per_s": batch * prompt.shape[1] / prefill,
           "cache_mib": None if held is None else held / 2**20, "peak_mib": peak_mib,
           "step_ms_median": 1e3 * statistics.median(steps),
           "tokens_per_s": batch / statistics.median(steps),
           "non_embedding_parameters": model.num_parameters(embeddings=False),
           "generate": "transformers" if peer else "weirdnet", "cuda_graph": graph}
    for name in ("weird", "softmax"):
        mixer = None if peer else _mixer_of(model, name)
        row[f"{name}_layer_step_us"] = (None if mixer is None
                                        else _layer_step_us(mixer, context, device, batch))
    return row


def _peer_lines(doc: dict) -> list[str]:
    """What the report says about ``transformers`` peers and matched models, if any ran."""
    rows = doc["results"]
    lines = []
    if any(r.get("generate") == "transformers" for r in rows):
        lines.append(f"- `transformers` peers ({doc['machine'].get('transformers', '?')}) "
                     "decode with their own cached greedy `generate`; their step is the time "
                     "between consecutive tokens (it includes `generate`'s own per-token work; "
                     "prefill s: up to the first token). Mamba and Mamba-2 run their "
                     "pure-PyTorch path on a CPU (the fused kernels are CUDA-only).")
    counts = {r["model"]: r["non_embedding_parameters"] for r in rows
              if r.get("non_embedding_parameters")}
    if counts:
        lines.append("- non-embedding parameters: " + "; ".join(
            f"{m} {n / 1e6:.3f}M" for m, n in counts.items()))
    return lines


def _markdown(doc: dict) -> str:
    from weirdnet.models import FUSED_STEP_MAX_BATCH
    from weirdnet_lab.opbench.report import fmt_ratio

    m, c = doc["machine"], doc["config"]
    baseline = c["models"][-1] if len(c["models"]) > 1 else None
    lines = [f"# Cached generation speed on {m['device']}", "",
             f"- date: {m['date']}; command: `{m['command']}`"
             + (f"; commit {m['commit'][:10]}" if m.get("commit") else ""),
             f"- machine: {m['cpu_model']}, {m['usable_cores']} usable cores; python "
             f"{m['python']}, torch {m['torch']}, {m['torch_threads']} torch threads",
             f"- batch {c['batch']}, float32, greedy; {c['new_tokens']} tokens decoded after "
             "a prompt of (context − new tokens); tokens/s = batch / median step time (a step "
             "= logits of the last token, argmax, `Backbone.step`: one cached pass through every "
             "layer, each Weird-attention block as one fused C call up to batch "
             f"{FUSED_STEP_MAX_BATCH})",
             "- layer step: median of the last 20 cached steps of one mixer layer (projections "
             "included, as PyTorch ops) up to `context` tokens", *_peer_lines(doc), ""]
    header = ["context", "model", "tokens/s", "step ms", "prefill s", "prefill tokens/s",
              "cache MiB", "peak MiB", "weird layer µs", "softmax layer µs"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in doc["results"]:
        us = [("–" if r[k] is None else f"{r[k]:.0f}")
              for k in ("weird_layer_step_us", "softmax_layer_step_us")]
        memory = [("–" if r.get(k) is None else f"{r[k]:,.0f}")
                  for k in ("prefill_tokens_per_s", "cache_mib", "peak_mib")]
        graph = " (CUDA graph)" if r.get("cuda_graph") else ""
        lines.append(f"| {r['context']} | {r['model']}{graph} | {r['tokens_per_s']:.1f} | "
                     f"{r['step_ms_median']:.2f} | {r['prefill_s']:.2f} | {memory[0]} | "
                     f"{memory[1]} | {memory[2]} | {us[0]} | {us[1]} |")
    lines += ["", "Prefill: the prompt fed to the caches in chunks of "
              f"{PREFILL_CHUNK:,} tokens (exact: a cache continues where it stopped). Cache "
              "MiB: every tensor the model's decoding caches hold after the last token; peak "
              "MiB: the peak RSS of prefill and decoding above the model and the prompt "
              "(weirdnet's models; a peer's own `generate` holds its cache itself)."]
    if baseline:
        others = list(doc["ratios"])
        lines += ["", f"Tokens/s relative to {baseline}:", "",
                  "| context | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
        for L in c["contexts"]:
            cells = [fmt_ratio(doc["ratios"][m][str(L)]) for m in others]
            lines.append(f"| {L} | " + " | ".join(cells) + " |")
    for t in doc["targets"]:
        value = fmt_ratio(t["value"]) if t["ratio"] else f"{t['value']:,.0f}"
        lines += ["", f"Target: {t['text']}: {value} — {'PASS' if t['passed'] else 'FAIL'}"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure, print and write the report (see :mod:`.output`); the exit status."""
    out = output.out_dir(args.out)

    def refuse() -> None:
        if args.quick:
            output.refuse_quick_over_full(output.full_reports(out, args.name), "--quick",
                                          args.force)

    try:
        _check_models(*_plan(args))  # before the output folder is touched
        refuse()
        with output.writing(out, "weirdnet bench decode") as session:
            refuse()  # again, now that no one else can write there
            return _run(args, argv, out, session)
    except output.BenchError as error:
        return output.fail(error)


def _plan(args: argparse.Namespace) -> tuple[list[str], list[int], int]:
    """(models, contexts, new tokens) of the run (--quick: contexts 256 512, 8 tokens)."""
    models = [m for m in args.models.split(",") if m]
    if args.quick:
        return models, [256, 512], 8
    return models, list(args.contexts), args.new_tokens


def _run(args: argparse.Namespace, argv: list[str], out: Path,
         session: output.Writing) -> int:
    import torch

    from weirdnet_lab.harness import alloc, machine
    from weirdnet_lab.harness.progress import Progress
    from weirdnet_lab.opbench import report

    models, contexts, new_tokens = _plan(args)
    # long contexts: freed blocks go back to the system, so the peak is what is held
    allocator = (alloc.return_freed_memory() if max(contexts) > PREFILL_CHUNK
                 else alloc.reuse_freed_memory())
    device = torch.device(args.device)
    previous = torch.get_num_threads()
    torch.set_num_threads(args.threads or machine.usable_cores())
    progress = Progress(len(models) * len(contexts))
    rows = []
    try:
        for L in contexts:
            for name in models:
                what = f"{name} at context {L}"
                progress.start(what)
                rows.append(measure(name, L, new_tokens, device, args.batch,
                                    args.cuda_graph))
                progress.done(what, f"{rows[-1]['tokens_per_s']:.1f} tokens/s")
    finally:
        progress.close()
        torch.set_num_threads(previous)
    doc = _document(args, argv, models, contexts, new_tokens, device, allocator, rows)
    markdown = _markdown(doc)
    with output.write_whole():
        paths = report.write_report(out, f"{args.name}_{device.type}", doc, markdown)
        session.kept = f"the report was written whole: {paths[0]} and {paths[1]}"
    print(markdown, end="", flush=True)
    output.print_written(paths)
    failed = any(not t["passed"] for t in doc["targets"])
    return 1 if args.check_targets and failed else 0


def _document(args, argv, models, contexts, new_tokens, device, allocator, rows) -> dict:
    import torch

    from weirdnet_lab.harness import machine

    info = machine.machine_info(device, ["weirdnet", *argv], allocator)
    speed = {(r["model"], r["context"]): r["tokens_per_s"] for r in rows}
    ratios, targets, L = {}, [], TARGET_CONTEXT
    base = models[-1] if len(models) > 1 else None
    if base is not None:
        ratios = {m: {str(c): speed[m, c] / speed[base, c] for c in contexts}
                  for m in models[:-1]}
    if args.batch == 1:  # the targets are set for batch 1
        for m, need in RATIO_TARGETS.items():
            if base == "gpt2-small-cpu" and (m, L) in speed:
                value = ratios[m][str(L)]
                targets.append({"text": f"{m} >= {need:g}x the tokens/s of {base} at context "
                                        f"{L}, batch 1", "value": value,
                                "passed": value >= need, "ratio": True})
        for m, need in SPEED_TARGETS.items():
            if (m, L) in speed:
                targets.append({"text": f"{m} >= {need:,.0f} tokens/s at context {L}, batch 1",
                                "value": speed[m, L], "passed": speed[m, L] >= need,
                                "ratio": False})
    return {"benchmark": "decode", "quick": bool(args.quick), "machine": info,
            "config": {"models": models, "contexts": contexts, "new_tokens": new_tokens,
                       "cuda_graph": bool(getattr(args, "cuda_graph", False)),
                       "batch": args.batch, "threads": torch.get_num_threads()},
            "results": rows, "ratios": ratios, "targets": targets}
