"""``python -m weirdnet_lab.gpu JOB SPEC``: one of the jobs' child processes."""

import sys

from .jobs import job_main

sys.exit(job_main(sys.argv[1:]))
