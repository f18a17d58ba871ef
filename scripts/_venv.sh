# Sourced by scripts/test and scripts/run: make sure .venv exists and holds
# kvmemory (editable) with its dev extra. Reinstalls only when pyproject.toml
# changed since the last install.
PYTHON="${PYTHON:-python3}"
VENV="${KVMEMORY_VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtual environment in $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.kvmemory-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "==> installing kvmemory with its dev extra" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev]' >&2
  touch "$stamp"
fi
