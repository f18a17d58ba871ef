"""The code examples in docs/ and README.md run, every public name is documented, and the site builds."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    "module",
    [
        "agents.memory",
        "agents.memory.stores",
        "agents.memory.stores.backend",
        "agents.memory.search",
        "agents.agent",
        "agents.service",
    ],
)
def test_every_public_name_is_in_the_api_reference(module: str) -> None:
    """Each name in a public package's __all__ appears in docs/api.md."""
    names = importlib.import_module(module).__all__
    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert [name for name in names if f"`{name}`" not in reference] == []


# The docs site's reference pages (docs/reference/*.md), generated from the docstrings.
REFERENCE_PAGES = {
    "agents.memory": "memory",
    "agents.memory.prompt": "prompt",
    "agents.memory.stores": "stores",
    "agents.memory.search": "search",
    "agents.agent": "agent",
    "agents.service": "service",
    "agents.integrations.smolagents": "integrations",
    "agents.integrations.ufo": "integrations",
    "agents.integrations.mcp": "integrations",
    "agents.integrations.web": "integrations",
    "agents.cli": "cli",
    "kvmemory": "cli",
}
PUBLIC_NAMES = [
    (module, name) for module in REFERENCE_PAGES for name in importlib.import_module(module).__all__
]


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the docs site with mkdocs in strict mode (a warning fails) and return its folder."""
    if not os.environ.get("CI"):  # under CI a missing mkdocs is an error, not a skip
        pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    built = build_site(ROOT, out)
    assert built.returncode == 0, built.stderr
    return out


@pytest.mark.parametrize(
    ("module", "name"), PUBLIC_NAMES, ids=[f"{m}.{n}" for m, n in PUBLIC_NAMES]
)
def test_public_name_is_in_the_generated_reference(site: Path, module: str, name: str) -> None:
    """Each name in a public module's __all__ has an entry in the site's reference pages."""
    page = site / "reference" / REFERENCE_PAGES[module] / "index.html"
    assert f'id="{module}.{name}"' in page.read_text(encoding="utf-8")


def build_site(config_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """Run a strict mkdocs build of the site configured in ``config_dir``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=config_dir,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "text", "complaint"),
    [
        ("index.md", "\nSee [the missing page](missing.md).\n", "missing.md"),
        ("unlisted.md", "# A page nobody listed\n", "unlisted.md"),
    ],
    ids=["broken link", "page left out of the nav"],
)
def test_site_build_fails_on(tmp_path: Path, page: str, text: str, complaint: str) -> None:
    """The strict site build fails on a broken link and on a page the nav leaves out."""
    if not os.environ.get("CI"):
        pytest.importorskip("mkdocs")
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "agents").symlink_to(ROOT / "agents")
    with (copy / "docs" / page).open("a", encoding="utf-8") as stream:
        stream.write(text)
    built = build_site(copy, tmp_path / "site")
    assert built.returncode != 0
    assert complaint in built.stderr


def test_home_page_first_code_block_fits_its_column(site: Path, browser: Any) -> None:
    """The first code block of the docs' home page needs no sideways scrolling in a desktop window."""
    browser.get((site / "index.html").as_uri())
    widths = browser.execute_script(
        "var code = document.querySelector('pre code'); return [code.scrollWidth, code.clientWidth];"
    )
    assert widths[0] <= widths[1]
