"""``weirdnet generate``: sample text from a trained language model (or decode with a
seq2seq model)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import check_seed, expected_errors, fail

HELP = "generate text with a trained model"

DESCRIPTION = """\
Generate text with a trained language model (or decode with a seq2seq model): CHECKPOINT
is a run directory (its best/ model), a best/ or checkpoints/step-* directory.  The prompt
is encoded with the text encoding of the run's dataset (UTF-8 for the byte corpora) and
the continuation is decoded the same way (bytes that do not decode are replaced).  Uses
the models' cached decoding (O(D log L) per token in Weird-attention layers).

A model reads at most max_len tokens (256 for configs/quickstart.toml): the prompt and
the new tokens together.  --max-new-tokens (default 200) is cut to what fits, with a
one-line note on stderr; a prompt that fills max_len is an error.  A seq2seq model's
limit is its decoder's max_len (by default it may use all of it; decoding stops at eos).

examples:
  weirdnet generate runs/quickstart --prompt "def "
  weirdnet generate runs/quickstart --prompt "import " --max-new-tokens 240 \\
      --temperature 0.8 --top-k 40 --num-samples 3 --seed 1
  weirdnet generate runs/seq2seq-reverse --prompt "12345" --temperature 0
  weirdnet generate runs/weird-a --device cuda --cuda-graph   # one graph replay a token
"""

DEFAULT_NEW_TOKENS = 200
"""``weirdnet generate``'s default ``--max-new-tokens`` (fewer where max_len leaves less)."""



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="CHECKPOINT", help="run, best/ or checkpoint dir")
    parser.add_argument("--prompt", default="", help="text to continue (default: empty)")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help=f"tokens to add (default {DEFAULT_NEW_TOKENS}); never more than "
                             "fit in the model's max_len after the prompt: then fewer, "
                             "with a note on stderr")
    parser.add_argument("--temperature", type=float, default=0.8,
                        help="sampling temperature; 0 = greedy (0.8)")
    parser.add_argument("--top-k", type=int, default=None, help="sample from the k best")
    parser.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass")
    parser.add_argument("--num-samples", type=int, default=1, help="continuations (1)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (0)")
    parser.add_argument("--encoding", default=None,
                        help="text encoding of the tokens (default: the run's dataset's)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="on CUDA, decode each new token as one CUDA graph replay "
                             "(Weird-attention-only language models, e.g. Weird-Net A; "
                             "another model or a CPU device is an error)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print each sample; the exit status."""
    try:
        texts = generate_texts(args)
    except expected_errors() as error:
        return fail("generate", error)
    for i, text in enumerate(texts):
        if len(texts) > 1:
            print(f"--- sample {i + 1} ---")
        print(text)
    return 0


def generate_texts(args: argparse.Namespace) -> list[str]:
    """The prompt plus each sampled continuation, decoded to text."""
    import torch

    from weirdnet.models.seq2seq import WeirdNetSeq2Seq
    from weirdnet.run.processes import resolve_device
    from weirdnet.train.trained import load_trained

    if (args.max_new_tokens is not None and args.max_new_tokens < 1) or args.num_samples < 1:
        raise ValueError("--max-new-tokens and --num-samples must be >= 1")
    check_seed(args.seed)
    device = resolve_device(args.device, what="--device")
    encoding = args.encoding or "utf-8"
    _check_encoding(encoding)
    model, _, info, model_dir = load_trained(Path(args.target), device)
    info = info or {}
    encoding = args.encoding or info.get("encoding") or "utf-8"
    _check_encoding(encoding)
    if not callable(getattr(model, "generate", None)):  # an LM (a plugin's too), seq2seq
        raise ValueError(f"{model_dir} holds a {type(model).__name__}; generate needs a "
                         "language model (WeirdNetLM, PeerLM) or a WeirdNetSeq2Seq")
    vocab = (model.config.decoder if isinstance(model, WeirdNetSeq2Seq)
             else model.config.backbone).vocab_size
    if vocab != 256:
        raise ValueError(f"{model_dir} has a vocabulary of {vocab} ids, not bytes; generate "
                         "encodes prompts as bytes (vocab_size 256)")
    try:
        prompt = list(args.prompt.encode(encoding))
    except UnicodeEncodeError as error:
        raise ValueError(f"--prompt cannot be encoded as {encoding}: {error.reason} at "
                         f"{error.object[error.start:error.end]!r} (pass --encoding)") from None
    generator = torch.Generator(device=device).manual_seed(args.seed)
    sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                "eos_id": info.get("eos_id"), "generator": generator}
    if isinstance(model, WeirdNetSeq2Seq):
        if args.cuda_graph:
            raise ValueError("--cuda-graph decodes language models, not a seq2seq model")
        return _decode_seq2seq(model, prompt, args, sampling, info, encoding, device)
    if not prompt:  # an empty prompt starts from a newline
        prompt = [ord("\n")]
    ids = torch.tensor([prompt] * args.num_samples, device=device)
    new = _new_tokens(args.max_new_tokens, len(prompt), model.max_len)
    if args.cuda_graph:
        out = _graph_generate(model, ids, new, sampling)
    else:
        out = model.generate(ids, new, **sampling)
    return [bytes(row).decode(encoding, errors="replace") for row in out.tolist()]


def _graph_generate(model, ids, new_tokens: int, sampling: dict):
    """``--cuda-graph``: :func:`weirdnet.models.decoding.graph_decode.graph_generate`."""
    from weirdnet.models.decoding.generation import Sampling
    from weirdnet.models.decoding.graph_decode import graph_generate
    from weirdnet.models.lm import WeirdNetLM

    if ids.device.type != "cuda":
        raise ValueError("--cuda-graph needs a CUDA device (--device cuda)")
    if not isinstance(model, WeirdNetLM):
        raise ValueError(f"--cuda-graph decodes weirdnet language models, not a "
                         f"{type(model).__name__}")
    return graph_generate(model, model.backbone, model.logits, ids, new_tokens,
                          Sampling(**sampling))


def _new_tokens(asked: int | None, prompt_length: int, max_len: int) -> int:
    """How many tokens to generate after a prompt of ``prompt_length``: ``asked`` (None:
    :data:`DEFAULT_NEW_TOKENS`), but never more than fit in the model's ``max_len``
    positions; fewer than asked is said in one line on stderr."""
    room = max_len - prompt_length
    if room < 1:
        raise ValueError(f"the prompt ({prompt_length} tokens) leaves no room in the model's "
                         f"max_len {max_len}; shorten --prompt")
    wanted = DEFAULT_NEW_TOKENS if asked is None else asked
    if wanted <= room:
        return wanted
    print(f"weirdnet generate: {wanted} new tokens do not fit the model's max_len {max_len} "
          f"after a {prompt_length}-token prompt; generating {room}", file=sys.stderr,
          flush=True)
    return room


def _check_encoding(encoding: str) -> None:
    """A text encoding Python knows (``codecs.lookup``), else ValueError."""
    import codecs

    try:
        text_encoding = getattr(codecs.lookup(encoding), "_is_text_encoding", True)
    except LookupError:
        text_encoding = False
    if not text_encoding:
        raise ValueError(f"unknown text encoding {encoding!r} (--encoding); e.g. utf-8, "
                         "ascii, gb18030, latin-1")


def _decode_seq2seq(model, prompt, args, sampling, info, encoding, device) -> list[str]:
    import torch

    bos, eos = info.get("bos_id"), info.get("eos_id")
    if bos is None:
        raise ValueError("the run's data_info.json names no bos_id; cannot start decoding")
    src = torch.tensor([prompt] * args.num_samples, device=device)
    # decoding stops at eos; the decoder cannot go beyond its max_len positions (after bos):
    # by default it may use them all, an explicit --max-new-tokens is cut with a note
    room = model.config.decoder.max_len - 1
    steps = min(DEFAULT_NEW_TOKENS, room) if args.max_new_tokens is None else _new_tokens(
        args.max_new_tokens, 1, model.config.decoder.max_len)
    out = model.generate(src, steps, bos, **sampling)
    texts = []
    for row in out[:, 1:].tolist():
        if eos in row:
            row = row[:row.index(eos)]
        texts.append(f"{args.prompt} -> {bytes(row).decode(encoding, errors='replace')}")
    return texts
