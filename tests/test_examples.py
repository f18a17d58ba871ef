"""The example session the README runs works and exports a session that reads back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agents.memory import Memory

ROOT = Path(__file__).resolve().parent.parent


def test_session_example_records_and_exports(tmp_path: Path) -> None:
    """examples/session.py runs offline, prints each step and exports four steps."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "session.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "step 4: click 'Publish'  (prompt history: 3 items)" in result.stdout
    assert "read back intact" in result.stdout
    # The example's item class lives in its __main__, which this process cannot import.
    exported = Memory.from_file(tmp_path / "session.json", on_unknown_class="base")
    assert exported.session_id == "save-report-as-pdf"
    assert exported.steps() == [1, 2, 3, 4]
