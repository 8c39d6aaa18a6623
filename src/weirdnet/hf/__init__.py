"""weirdnet language models in the Hugging Face tool chain (the optional ``hf`` extra).

Importing this package registers :class:`WeirdNetConfig` (``model_type = "weirdnet"``) with
``AutoConfig`` and :class:`WeirdNetForCausalLM` with ``AutoModelForCausalLM``, so a folder
written by ``weirdnet export-hf`` (or ``save_pretrained``) loads with
``AutoModelForCausalLM.from_pretrained(folder)`` and generates through ``generate()``
(greedy, sampling, beam search, left-padded batches), and no Python file of the folder is
run.  lm-evaluation-harness scores it through ``python -m weirdnet.hf.harness`` (``lm_eval``
with these classes registered; see :mod:`.harness`).  The folder also loads with
``trust_remote_code=True`` without this import, but that runs the folder's own Python
files (see :data:`.remote.RISK`): do not use it on a folder you did not write.

Tested with the ``transformers`` versions of :data:`TESTED_TRANSFORMERS` (the range the
``hf`` extra pins): the cache and generation interfaces change between releases.
"""

from __future__ import annotations

import warnings

try:
    import transformers
except ImportError as error:  # pragma: no cover - exercised in a process without it
    raise ImportError("weirdnet.hf needs the Hugging Face packages: pip install "
                      "'weirdnet[hf]' (transformers, tokenizers)") from error
from packaging.version import Version  # noqa: E402  (installed with transformers)

TESTED_TRANSFORMERS = (">=5.24", "<5.25")


def _check_version() -> None:
    version = Version(transformers.__version__)
    if not Version("5.24") <= version < Version("5.25"):
        warnings.warn(f"weirdnet.hf is tested with transformers {','.join(TESTED_TRANSFORMERS)}"
                      f"; this is {version}: its cache or generation interface may differ "
                      "(pip install 'weirdnet[hf]' installs a tested one)", stacklevel=3)


_check_version()

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from .cache import WeirdNetCache  # noqa: E402
from .configuration import WeirdNetConfig  # noqa: E402
from .export import ExportError, export_hf  # noqa: E402
from .modeling import WeirdNetForCausalLM, WeirdNetPreTrainedModel  # noqa: E402
from .tokenizer import byte_tokenizer, load_tokenizer  # noqa: E402

AutoConfig.register(WeirdNetConfig.model_type, WeirdNetConfig, exist_ok=True)
AutoModelForCausalLM.register(WeirdNetConfig, WeirdNetForCausalLM, exist_ok=True)

__all__ = ["ExportError", "WeirdNetCache", "WeirdNetConfig", "WeirdNetForCausalLM",
           "WeirdNetPreTrainedModel", "byte_tokenizer", "export_hf", "load_tokenizer"]
