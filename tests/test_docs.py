"""The code examples in docs/ and README.md run, and every public name is documented."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path) -> list[str]:
    return FENCE.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", DOC_FILES, ids=[p.name for p in DOC_FILES])
def test_doc_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block of a docs page runs without error, in order, in a scratch folder."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for number, block in enumerate(python_blocks(path), start=1):
        code = compile(block, f"{path.name} block {number}", "exec")
        exec(code, namespace)


def test_docs_have_examples() -> None:
    """The user guide carries runnable examples (so the test above checks something)."""
    assert len(python_blocks(ROOT / "docs" / "index.md")) >= 5


@pytest.mark.parametrize(
    "module", ["agents.memory", "agents.memory.stores", "agents.memory.search", "agents.agent"]
)
def test_every_public_name_is_in_the_api_reference(module: str) -> None:
    """Each name in a public package's __all__ appears in docs/api.md."""
    names = importlib.import_module(module).__all__
    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert [name for name in names if f"`{name}`" not in reference] == []
