"""Smoke test of an installed (non-editable) weirdnet wheel, run from outside the
repository by `.ci/run` and tests/test_wheel.py:

1. weirdnet is imported from the environment it was installed into, not the repository;
2. every C kernel builds and loads (the scan, the fused decode step, the short
   convolution);
3. a language model's decoding step runs through the fused C block step;
4. a packaged config is reached by name;
5. the main job (`weirdnet train quickstart`) trains a few steps and evaluates.

Run with the wheel's Python, in an empty working directory; WEIRDNET_CACHE_DIR should
point at an empty folder so the kernels are built from the wheel's C sources.
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

job = [sys.executable, "-m", "weirdnet", "train", "quickstart", "--set", "train.steps=3",
       "--set", "train.eval_every=3", "--set", "train.eval_batches=2", "--set",
       "train.log_every=1", "--set", "train.batch_size=2"]
done = subprocess.run(job, capture_output=True, text=True, timeout=900)
assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
assert (Path("runs") / "quickstart").is_dir(), "the main job wrote no run directory"
print("wheel smoke: the main job trained 3 steps and evaluated")
