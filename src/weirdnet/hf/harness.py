"""lm-evaluation-harness with weirdnet models, offline.

Two local tasks, written by :func:`write_tasks` (``weirdnet harness-tasks DIR``) from the
held-out test split of the ``python-stdlib`` corpus that every Python installation has,
so ``lm_eval`` runs with no download:

- ``weirdnet_stdlib_nextline`` (multiple choice, metrics ``acc`` and ``acc_norm``): a few
  lines of Python source, then four candidate next lines; the true one and three drawn
  from elsewhere in the split with about the same length.  Scored by the log-likelihood
  of each candidate given the context, as HellaSwag-style tasks are.
- ``weirdnet_stdlib_bpb`` (rolling log-likelihood, metrics ``bits_per_byte``,
  ``byte_perplexity``, ``word_perplexity``): whole held-out passages.

Run them on an exported model (``weirdnet export-hf``)::

    weirdnet harness-tasks runs/harness-tasks --max-len 256   # the model's max_len: none cut
    python -m weirdnet.hf.harness --model hf --model_args pretrained=OUT \\
        --include_path runs/harness-tasks --tasks weirdnet_stdlib_nextline,weirdnet_stdlib_bpb

``python -m weirdnet.hf.harness ARGS`` is ``lm_eval ARGS`` after ``import weirdnet.hf``,
which registers the classes, so no ``trust_remote_code`` is needed and no Python file of
the model folder runs.  (``lm_eval`` itself would need ``trust_remote_code=True`` in
``--model_args``, which runs the folder's files: :data:`.remote.RISK`.)  On a machine that
reaches the Hugging Face Hub the usual tasks work the same way:
``--tasks lambada_openai,hellaswag,arc_easy``.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

from weirdnet.data import get
from weirdnet.run.files import write_atomic

NEXTLINE, BPB = "weirdnet_stdlib_nextline", "weirdnet_stdlib_bpb"
CONTEXT_LINES, CHOICES = 6, 4
_LINE_CHARS = (12, 100)  # a candidate line's length without its indentation, in characters

_HEADER = """\
# {title} (weirdnet harness-tasks).
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
"""

_MULTIPLE_CHOICE = """\
output_type: multiple_choice
doc_to_text: "{{context}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

_ROLLING = """\
output_type: loglikelihood_rolling
doc_to_text: "{{text}}"
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 1.0
"""


def held_out_lines() -> list[str]:
    """The lines of the ``python-stdlib`` test split (the partial first and last lines,
    cut by the split's byte boundaries, are dropped)."""
    text = get("python-stdlib", "test", seq_len=1).data.tobytes().decode("utf-8", "ignore")
    return text.split("\n")[1:-1]


def _bytes(text: str) -> int:
    """Length of ``text`` in the byte tokenizer's tokens (one per UTF-8 byte)."""
    return len(text.encode("utf-8"))


def nextline_items(lines: list[str], count: int, seed: int = 0,
                   max_len: int | None = None) -> list[dict]:
    """``count`` multiple-choice items: ``context`` (the previous lines, no trailing
    newline), ``choices`` ("\\n" + a line, so the delimiter is the newline itself) and
    ``label`` (the index of the true line).

    The context is the ``CONTEXT_LINES`` previous lines.  With ``max_len`` (the model's
    context in bytes) it keeps only as many whole previous lines as let the context and
    its longest choice fit in ``max_len`` bytes, so lm_eval never cuts a request; lines
    whose own previous line cannot fit that way are not drawn."""
    def fits(line: str) -> bool:
        return _LINE_CHARS[0] <= len(line.strip()) <= _LINE_CHARS[1]

    candidates = [i for i in range(CONTEXT_LINES, len(lines)) if fits(lines[i])
                  and all(lines[j].strip() for j in range(i - CONTEXT_LINES, i))]
    by_length = sorted(candidates, key=lambda i: len(lines[i]))
    rank = {line: place for place, line in enumerate(by_length)}

    def pool_of(i: int) -> list[int]:
        where = rank[i]
        return [j for j in by_length[max(0, where - 20):where + 21]
                if lines[j].strip() != lines[i].strip()]

    def room(i: int) -> int:  # bytes left for the context beside the longest possible choice
        longest = max(_bytes(lines[j]) for j in [i, *pool_of(i)])
        return max_len - 1 - longest

    targets = candidates if max_len is None else [
        i for i in candidates if _bytes(lines[i - 1]) <= room(i)]
    if len(targets) < count + CHOICES:
        fit = "" if max_len is None else f" that fit in {max_len} bytes"
        raise ValueError(f"the held-out split has {len(targets)} usable lines{fit}, fewer "
                         f"than {count} items need")
    rng = random.Random(seed)
    items = []
    for i in sorted(rng.sample(targets, count)):
        others = rng.sample(pool_of(i), CHOICES - 1)
        choices = [lines[j] for j in others]
        label = rng.randrange(CHOICES)
        choices.insert(label, lines[i])
        context = lines[i - CONTEXT_LINES:i]
        if max_len is not None:
            budget = max_len - 1 - max(_bytes(line) for line in choices)
            while len(context) > 1 and _bytes("\n".join(context)) > budget:
                context = context[1:]
        items.append({"context": "\n".join(context),
                      "choices": ["\n" + line for line in choices], "label": label})
    return items


def passages(lines: list[str], count: int, size: int = 2000) -> list[dict]:
    """``count`` passages of about ``size`` characters (whole lines), evenly spaced."""
    text, out = "\n".join(lines), []
    step = max(size, len(text) // max(count, 1))
    for start in range(0, len(text) - size, step)[:count]:
        begin = text.find("\n", start) + 1
        end = text.find("\n", begin + size)
        out.append({"text": text[begin:end if end > 0 else None]})
    return out


def write_tasks(directory: str | os.PathLike, *, items: int = 500, passages_count: int = 50,
                seed: int = 0, max_len: int | None = None) -> list[Path]:
    """Write both tasks (YAML + JSON lines) into ``directory``; returns the YAML paths.
    ``max_len`` sizes the multiple-choice contexts to a model's context in bytes (see
    :func:`nextline_items`); the rolling task needs no sizing (lm_eval windows it)."""
    if max_len is not None and max_len < 2 * _LINE_CHARS[1]:
        raise ValueError(f"max_len={max_len} leaves no room for a line of context and a "
                         f"candidate line; it must be at least {2 * _LINE_CHARS[1]} bytes")
    directory = Path(directory).resolve()
    lines = held_out_lines()
    tasks = ((NEXTLINE, "Next line of Python source, multiple choice", _MULTIPLE_CHOICE,
              nextline_items(lines, items, seed, max_len)),
             (BPB, "Bits per byte of held-out Python source", _ROLLING,
              passages(lines, passages_count)))
    written = []
    for task, title, body, records in tasks:
        data = directory / f"{task}.jsonl"
        write_atomic(data, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        header = _HEADER.format(title=title, task=task, data=json.dumps(str(data)))
        written.append(write_atomic(directory / f"{task}.yaml", header + body))
    return written


def main() -> None:
    """``python -m weirdnet.hf.harness ARGS``: ``lm_eval ARGS`` with the weirdnet classes
    registered (no ``trust_remote_code`` needed)."""
    import weirdnet.hf  # noqa: F401  (registers WeirdNetConfig and WeirdNetForCausalLM)

    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError as error:
        raise SystemExit(f"lm-evaluation-harness is not installed ({error}): "
                         "pip install 'weirdnet[harness]'") from None
    sys.argv[0] = "lm_eval"
    cli_evaluate()


if __name__ == "__main__":
    main()
