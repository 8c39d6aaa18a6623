"""Smoke test of an installed (non-editable) weirdnet wheel, run from outside the
repository by `.ci/run` and tests/test_wheel.py:

1. weirdnet is imported from the environment it was installed into, not the repository;
2. every C kernel builds and loads (the scan, the fused decode step, the short
   convolution);
3. a language model's decoding step runs through the fused C block step;
4. a packaged config is reached by name;
5. the main job (`weirdnet train quickstart`) trains a few steps and evaluates;
6. the trained run is evaluated again, generates text and is exported as a Hugging
   Face folder (`weirdnet eval | generate | export-hf`);
7. no module of the lab (weirdnet_lab, the weirdnet-lab distribution) was imported, and
   without the lab `weirdnet bench` is one line saying how to install it, status 2
   (skipped with --with-lab: the lab's wheel is installed too, and `weirdnet bench
   --help` must then work).

Run with the wheel's Python, in an empty working directory; WEIRDNET_CACHE_DIR should
point at an empty folder so the kernels are built from the wheel's C sources.

    python wheel_smoke.py              # the weirdnet wheel alone
    python wheel_smoke.py --with-lab   # and the weirdnet-lab wheel: bench --help
"""

import os
import subprocess
import sys
from pathlib import Path

import torch

import weirdnet
from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM
from weirdnet.ops.block_step import cpu as block_step
from weirdnet.ops.short_conv import cpu as short_conv
from weirdnet.ops.weird_scan import cpu as weird_scan
from weirdnet.train.named_configs import resolve

where = os.path.realpath(weirdnet.__file__)
assert where.startswith(os.path.realpath(sys.prefix)), f"weirdnet imported from {where}"
assert weird_scan.load() is not None, "the weird_scan C kernel did not build"
assert block_step.load() is not None, block_step.unavailable_reason()
assert short_conv.load() is not None, "the short_conv C kernel did not build"
print("wheel smoke: the three C kernels build and load from", os.path.dirname(where))

backbone = BackboneConfig(vocab_size=16, dim=16, depth=2, d_ff=32, pattern="A", max_len=32,
                          causal=True)
model = WeirdNetLM(LMConfig(backbone=backbone)).eval()
with torch.no_grad():
    cache = model.backbone.init_cache(1)
    model.backbone.step(torch.tensor([3]), cache)
assert cache.fused and all(step is not None for step in cache.fused), cache.fused
print("wheel smoke: decoding runs through the fused C block step")

config = resolve("quickstart")
package = Path(weirdnet.__file__).parent
assert config.is_file() and config.absolute().is_relative_to(package), config
print("wheel smoke: the packaged config 'quickstart' is", config)

WEIRDNET = [sys.executable, "-m", "weirdnet"]


def weirdnet_command(*argv: str, status: int = 0) -> subprocess.CompletedProcess:
    """Run ``python -m weirdnet ARGV`` here with Python's import log; assert its exit
    status and, unless --with-lab, that it imported no lab module.  Its stderr comes back
    without the log."""
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    done = subprocess.run([*WEIRDNET, *argv], capture_output=True, text=True, timeout=900,
                          env=env)
    log = [line for line in done.stderr.splitlines(keepends=True)
           if line.startswith("import time:")]
    done.stderr = "".join(line for line in done.stderr.splitlines(keepends=True)
                          if not line.startswith("import time:"))
    assert done.returncode == status, (argv, done.stdout[-2000:] + done.stderr[-3000:])
    imported = {line.rsplit("|", 1)[-1].strip() for line in log}
    lab = sorted(m for m in imported if m.split(".")[0] == "weirdnet_lab")
    assert "--with-lab" in sys.argv[1:] or not lab, (argv, f"imported the lab: {lab}")
    return done


if "--with-lab" in sys.argv[1:]:
    assert "scan" in weirdnet_command("bench", "--help").stdout
    print("wheel smoke: with the lab's wheel, `weirdnet bench --help` lists the benchmarks")
    sys.exit(0)

weirdnet_command("train", "quickstart", "--set", "train.steps=3", "--set",
                 "train.eval_every=3", "--set", "train.eval_batches=2", "--set",
                 "train.log_every=1", "--set", "train.batch_size=2")
assert (Path("runs") / "quickstart").is_dir(), "the main job wrote no run directory"
print("wheel smoke: the main job trained 3 steps and evaluated")

weirdnet_command("eval", "runs/quickstart", "--limit", "2", "--batch-size", "2")
sample = weirdnet_command("generate", "runs/quickstart", "--prompt", "def ",
                          "--max-new-tokens", "8").stdout
assert sample.strip(), "generate printed nothing"
weirdnet_command("export-hf", "runs/quickstart", "exported")
assert (Path("exported") / "config.json").is_file(), "export-hf wrote no config.json"
print("wheel smoke: the run evaluates, generates and exports as a Hugging Face folder")

lab = [m for m in sys.modules if m.split(".")[0] == "weirdnet_lab"]
assert not lab, f"the lab was imported: {lab}"  # here; each command's log is checked above
bench = weirdnet_command("bench", "--help", status=2)
assert "pip install -e ./lab" in bench.stderr and bench.stderr.count("\n") == 1, bench.stderr
print("wheel smoke: no lab module imported; `weirdnet bench` without the lab says how to "
      "install it (status 2)")
