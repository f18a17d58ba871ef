# Sourced by scripts/test and scripts/run: make sure .venv exists and holds
# kvmemory (editable), with the extra named by KVMEMORY_EXTRA ("dev" for the
# tests; none for the example, which needs only kvmemory's runtime
# dependencies). Reinstalls only when pyproject.toml changed since the last
# install; an install with the dev extra also serves a run without extras.
PYTHON="${PYTHON:-python3}"
VENV="${KVMEMORY_VENV:-.venv}"
extra="${KVMEMORY_EXTRA:-}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtual environment in $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.kvmemory-installed${extra:+-$extra}"
dev_stamp="$VENV/.kvmemory-installed-dev"
fresh() { [ -f "$1" ] && ! [ pyproject.toml -nt "$1" ]; }
if ! fresh "$stamp" && ! fresh "$dev_stamp"; then
  echo "==> installing kvmemory${extra:+ with its $extra extra}" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".${extra:+[$extra]}" >&2
  touch "$stamp"
fi
