"""``weirdnet bench mixers``: every registered sequence mixer as a full layer, against SDPA.

Methods are discovered at run time from :mod:`weirdnet.layers`' registry, so mixers added
later appear automatically:

- ``<mixer>``: the layer's non-causal form, ``build(mixer, D, causal=False, **options)``;
- ``<mixer>-causal``: its causal form, ``build(mixer, D, causal=True, **options)``;
- ``sdpa`` / ``sdpa-causal``: ``scaled_dot_product_attention`` alone (no projections) on
  q, k, v the size of x, with D / head_dim heads.

A form exists when building it at the run's width succeeds; a ``ValueError`` means it
does not (e.g. Linformer has no causal form), and the run leaves it out with a note.
``options`` are ``max_len=L`` for constructors with a ``max_len`` parameter (so every
length is allowed; other options such as Linformer's ``k`` keep their defaults) and
``heads=D / head_dim`` for constructors with a ``heads`` parameter (the raw SDPA's heads;
the registry's own default for D=256).

Each layer's inputs are x (B, L, D) and all its parameters, all requiring grad.  Ratios
compare every method with the ``softmax`` mixer layer and with raw SDPA of its form;
targets are on DBA and Relation (non-causal) against the softmax layer, or raw SDPA when
the run has no softmax layer row.
"""

from __future__ import annotations

import argparse
import functools
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from weirdnet_lab.opbench import runner
from weirdnet_lab.opbench.spec import Cap, OpBench, Ratio, Target

if TYPE_CHECKING:  # pragma: no cover
    from weirdnet_lab.opbench.methods import Method, Shape

DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
CAUSAL = "-causal"
BASELINE = "softmax"
"""The mixer layer the others are compared with first (softmax attention via SDPA)."""
RAW = {"sdpa": False, "sdpa-causal": True}
"""The raw-op baselines and their causality."""
QUADRATIC = frozenset({BASELINE, BASELINE + CAUSAL, *RAW})
"""Methods whose cost grows as L^2: the ones ``--softmax-max-len`` caps."""
NAMED_FORMS = {"dba-paper-literal": ("dba", {"form": "paper-literal"})}
"""Methods that are a registered mixer with options other than its defaults: DBA's second
reading (its default is the authors' form; docs/design.md §4)."""


def mixer_names() -> list[str]:
    """Registered mixer names, sorted, then :data:`NAMED_FORMS` (imports torch)."""
    from weirdnet import layers

    return [*layers.available(), *NAMED_FORMS]


def _registered(mixer: str) -> tuple[str, dict]:
    """(registry name, constructor options) of a mixer name or a :data:`NAMED_FORMS` key."""
    return NAMED_FORMS.get(mixer, (mixer, {}))


def method_names() -> tuple[str, ...]:
    """Every method name: non-causal forms, ``sdpa``, causal forms, ``sdpa-causal``."""
    mixers = [m for m in mixer_names() if m not in RAW]
    return (*mixers, "sdpa", *(m + CAUSAL for m in mixers), "sdpa-causal")


def parse(name: str) -> tuple[str, bool]:
    """(mixer, causal) of a method name (``sdpa``/``sdpa-causal`` included)."""
    if name in RAW:
        return "sdpa", RAW[name]
    mixers = mixer_names()
    if name in mixers:
        return name, False
    if name.endswith(CAUSAL) and name[: -len(CAUSAL)] in mixers:
        return name[: -len(CAUSAL)], True
    raise ValueError(f"unknown mixers method {name!r}; choose from {', '.join(method_names())}")


def is_causal(name: str) -> bool:
    """Whether method ``name`` is a causal form (read from the name alone)."""
    return name.endswith(CAUSAL)


def form_of(name: str, mixer: str) -> str:
    """The method of ``mixer`` with the same form (causal or not) as method ``name``."""
    return mixer + CAUSAL if is_causal(name) else mixer


def raw_of(name: str) -> str:
    """The raw SDPA method with the form of method ``name``."""
    return "sdpa-causal" if is_causal(name) else "sdpa"


@functools.cache
def _constructor_parameters(mixer: str) -> frozenset[str]:
    from weirdnet.layers import factory

    try:
        return frozenset(inspect.signature(factory(mixer)).parameters)
    except (TypeError, ValueError):
        return frozenset()


def layer_options(mixer: str, shape: Shape) -> dict:
    """Constructor options of ``mixer`` (a registered name or a :data:`NAMED_FORMS` key) at
    ``shape``: its named options, ``max_len=L`` and ``heads`` where the constructor has
    those parameters."""
    mixer, named = _registered(mixer)
    params = _constructor_parameters(mixer)
    options = dict(named)
    if "max_len" in params:
        options["max_len"] = shape.L
    if "heads" in params:
        options["heads"] = shape.heads
    return options


def _required_forward_inputs(layer) -> list[str]:
    """Parameters of ``layer.forward`` besides x without a default (e.g. a context)."""
    try:
        params = list(inspect.signature(layer.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params[1:]
            if p.kind in positional and p.default is inspect.Parameter.empty]


def _probe(mixer: str, causal: bool):
    """``Method.probe``: does this form exist at width ``dim`` (and take x alone)?"""

    def probe(dim: int, head_dim: int, max_len: int) -> str | None:
        from weirdnet import layers
        from weirdnet_lab.opbench.methods import Shape

        options = layer_options(mixer, Shape(1, max_len, dim, head_dim))
        try:
            layer = layers.build(_registered(mixer)[0], dim, causal=causal, **options)
        except ValueError as exc:
            form = "causal" if causal else "non-causal"
            return f"no {form} form at D={dim} (ValueError: {exc})"
        except Exception:  # noqa: BLE001 - the rows will show the error
            return None
        needs = _required_forward_inputs(layer)
        if needs:
            return f"its forward needs {', '.join(needs)} besides x"
        return None

    return probe


@functools.cache
def method(name: str) -> Method:
    """The method called ``name`` (nothing is built until its ``build``/``probe`` runs)."""
    from weirdnet_lab.opbench.methods import Method, layer_builder, sdpa_builder

    mixer, causal = parse(name)
    capped = name in QUADRATIC
    if mixer == "sdpa":
        return Method(name, name, "sdpa", sdpa_builder(causal), capped=capped)

    def options(shape: Shape) -> dict:
        return layer_options(mixer, shape)

    return Method(name, name, "layer", layer_builder(_registered(mixer)[0], causal, options),
                  capped=capped, probe=_probe(mixer, causal), options=options)


SPEED_SOFTMAX = "fwd+bwd speed-up vs the softmax layer (softmax layer time / method time)"
SPEED_SDPA = "fwd+bwd speed-up vs raw SDPA (SDPA op time / method time)"
MEM_SOFTMAX = "peak extra memory vs the softmax layer (method / softmax layer)"
MEM_SDPA = "peak extra memory vs raw SDPA (method / SDPA op)"


def ratio_key(kind: str, name: str) -> str:
    """Key of ratio ``kind`` (``fwdbwd_speedup_vs_softmax``, ``fwdbwd_speedup_vs_sdpa``,
    ``mem_vs_softmax``, ``mem_vs_sdpa``) of method ``name``."""
    return f"{kind}:{name}"


def ratios(methods: Sequence[str]) -> tuple[Ratio, ...]:
    """Per method, against the same form: fwd+bwd speed-up over the softmax layer and over
    raw SDPA, and peak memory relative to each.  A baseline gets no column against itself;
    raw SDPA gets none against the softmax layer."""
    speed_soft, speed_raw, mem_soft, mem_raw = [], [], [], []
    for m in methods:
        soft, raw = form_of(m, BASELINE), raw_of(m)
        if m not in RAW and m != soft:
            speed_soft.append(Ratio(ratio_key("fwdbwd_speedup_vs_softmax", m),
                                    f"fwd+bwd: {soft} / {m}", "fwdbwd_ms", soft, m,
                                    SPEED_SOFTMAX, m))
            mem_soft.append(Ratio(ratio_key("mem_vs_softmax", m), f"memory: {m} / {soft}",
                                  "mem_mib", m, soft, MEM_SOFTMAX, m))
        if m not in RAW:
            speed_raw.append(Ratio(ratio_key("fwdbwd_speedup_vs_sdpa", m),
                                   f"fwd+bwd: {raw} / {m}", "fwdbwd_ms", raw, m, SPEED_SDPA, m))
            mem_raw.append(Ratio(ratio_key("mem_vs_sdpa", m), f"memory: {m} / {raw}",
                                 "mem_mib", m, raw, MEM_SDPA, m))
    return (*speed_soft, *speed_raw, *mem_soft, *mem_raw)


_AGAINST = ("the softmax mixer layer (`softmax`)", "raw SDPA (`sdpa`, no projections)")

TARGETS: tuple[Target, ...] = (
    Target("dba_speed_4k", "DBA fwd+bwd at L=4096 at least 4x faster than SDPA (non-causal)",
           4096, ratio_key("fwdbwd_speedup_vs_softmax", "dba"), ">=", 4.0,
           fallbacks=(ratio_key("fwdbwd_speedup_vs_sdpa", "dba"),), baselines=_AGAINST),
    Target("dba_memory_4k", "DBA peak extra memory of fwd+bwd at L=4096 less than SDPA's "
           "(non-causal)", 4096, ratio_key("mem_vs_softmax", "dba"), "<", 1.0,
           fallbacks=(ratio_key("mem_vs_sdpa", "dba"),), baselines=_AGAINST),
    Target("relation_speed_16k",
           "Relation fwd+bwd at L=16384 at least 20x faster than SDPA (non-causal)", 16384,
           ratio_key("fwdbwd_speedup_vs_softmax", "relation"), ">=", 20.0,
           fallbacks=(ratio_key("fwdbwd_speedup_vs_sdpa", "relation"),), baselines=_AGAINST),
)
"""Each compares the layer with the ``softmax`` layer when the run measured it at that
length, else with raw ``sdpa``; the report says which."""


def _describe(doc: dict) -> list[str]:
    c = doc["config"]
    heads, width = c["heads"], c["dim"] // c["heads"]
    return [
        f"- shapes: B={c['batch']}, D={c['dim']}, dtype {c['dtype']}; every layer maps x "
        f"(B, L, D) to (B, L, D); raw SDPA: q, k, v (B, {heads}, L, {width}), no projections",
        f"- layers: `weirdnet.layers.build(name, {c['dim']}, causal=...)` with max_len=L and "
        f"heads={heads} where the constructor has those parameters, other options at their "
        "defaults; `<mixer>` is the non-causal form, `<mixer>-causal` the causal one",
    ]


OPBENCH = OpBench(
    name="mixers",
    title="Sequence mixers (full layers) vs SDPA",
    method_names=method_names,
    method=method,
    default_lengths=DEFAULT_LENGTHS,
    ratios=ratios,
    targets=TARGETS,
    describe=_describe,
    grad_inputs="x and all layer parameters (q, k, v for raw SDPA)",
    ratio_note="Speed: baseline fwd+bwd time / the method's (above 1: the method is faster). "
               "Memory: the method's peak extra memory of fwd+bwd / the baseline's (below 1: "
               "the method needs less). The baseline has the method's form: `softmax` or "
               "`sdpa` for a non-causal method, `softmax-causal` or `sdpa-causal` for a "
               "causal one.",
    cap=Cap("--softmax-max-len", 0,
            "longest L for the quadratic rows (softmax layers and raw SDPA), 0 for no limit "
            "(default: 0); the targets need them at L=4096 and 16384"),
    methods_help="from the registered mixers: NAME (non-causal form), NAME-causal (causal "
                 "form), and sdpa, sdpa-causal (raw SDPA op) (default: every form that "
                 "exists)",
)


# --- the command: ``weirdnet bench mixers`` --------------------------------------------

HELP = "every registered mixer layer vs SDPA: time and peak memory"
DESCRIPTION = """\
Benchmark every registered sequence mixer (weirdnet.layers) as a full layer, with raw
PyTorch scaled_dot_product_attention (SDPA) as the baseline, side by side in one process.

Methods are found in the registry at run time: NAME is a mixer's non-causal form
(build(NAME, D, causal=False)), NAME-causal its causal form; a form whose build raises
ValueError does not exist and is left out. Constructors with a max_len parameter get
max_len=L, with a heads parameter heads=D/head-dim; other options keep their defaults.
sdpa and sdpa-causal are the raw op (no projections) with D/64 heads of 64.

For every length L and method it reports the median time of an inference forward and of
a forward+backward (x and all layer parameters require grad, fixed random grad_out), and
the peak extra memory of one forward+backward (CPU: peak RSS in a fresh child process per
row; CUDA: torch.cuda.max_memory_allocated). Ratios per L compare each method with the
softmax mixer layer and with raw SDPA of the same form. Targets (only for lengths that
were measured): DBA fwd+bwd at L=4096 >= 4x faster than SDPA and with less peak memory,
Relation fwd+bwd at L=16384 >= 20x faster than SDPA (all non-causal; SDPA = the softmax
layer when it was measured, else raw sdpa; the report says which).

Output: a Markdown report on stdout and in OUT/mixers_<device>.md, all raw numbers and
machine info in OUT/mixers_<device>.json. Progress goes to stderr. OUT is --out DIR, else
$WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench (a scratch folder); the committed
results are rewritten only with --out lab/results, and a --quick run refuses a
folder that holds a full run's report (unless --force). One run writes into OUT at a
time; Ctrl-C or SIGTERM ends the run without a report (OUT left as it was).

examples:
  weirdnet bench mixers                        # full run (long on CPU: softmax at 16K)
  weirdnet bench mixers --out lab/results   # full run, into the committed results
  weirdnet bench mixers --lengths 4096 --methods dba,softmax,sdpa
  weirdnet bench mixers --softmax-max-len 4096 # skip the slow quadratic rows above 4K
  weirdnet bench mixers --quick                # seconds-long smoke run
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every operator benchmark (:mod:`.runner`), for this one."""
    runner.add_arguments(parser, OPBENCH)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure, report and write the records (:func:`.runner.run`); the exit status."""
    return runner.run(OPBENCH, args, argv)
