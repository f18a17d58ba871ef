"""Tests for kvmemory.py: the command's entry point and its check of a clobbered ``agents`` install."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
from contextlib import redirect_stdout
from pathlib import Path

import pytest

import kvmemory

ROOT = Path(__file__).resolve().parent.parent
FOREIGN_INIT = '"""Another distribution\'s agents package."""\nfrom .memory import *  # noqa\n'


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """Return a copy of kvmemory's files as installed in a site-packages folder."""
    folder = tmp_path / "site"
    shutil.copytree(
        ROOT / "agents", folder / "agents", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "kvmemory.py", folder / "kvmemory.py")
    return folder


def install_other(site: Path, name: str, files: dict[str, str]) -> None:
    """Write ``files`` into ``site`` as another distribution ``name`` would install them."""
    info = site / f"{name.replace('-', '_')}-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.2.0\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)


def record_kvmemory(site: Path) -> None:
    """Write the dist-info a kvmemory wheel leaves beside its package, its RECORD listing every file."""
    info = site / "kvmemory-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvmemory\nVersion: 0.1.0\n")
    files = sorted(path.relative_to(site).as_posix() for path in site.rglob("*") if path.is_file())
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))


def python(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run Python on ``site`` and the installed dependencies only, in the folder above it.

    ``-S`` skips the .pth files, so the checkout's own editable install stays out of the way.
    """
    path = os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-S", *args],
        cwd=site.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_this_install_has_no_problem() -> None:
    """The package the tests run on is kvmemory's: no problem is reported."""
    assert kvmemory.install_problem() is None


def test_main_runs_the_command() -> None:
    """kvmemory.main runs the kvmemory command line."""
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        kvmemory.main(["--help"])
    assert exit_info.value.code == 0
    assert out.getvalue().startswith("usage: kvmemory")


def test_command_names_the_distribution_that_overwrote_agents(site: Path) -> None:
    """With openai-agents' agents/__init__.py in place, the command says so in one line and exits 1."""
    install_other(site, "openai-agents", {"agents/__init__.py": FOREIGN_INIT})
    done = python(site, "-m", "kvmemory", "sessions", "runs.db")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        f"kvmemory: error: kvmemory's install is broken: {site / 'agents' / '__init__.py'} "
        "belongs to openai-agents 0.2.0. kvmemory shares the import name 'agents'"
    )


def test_import_under_a_foreign_agents_package_says_so(site: Path) -> None:
    """import agents.memory under another package's agents/__init__.py raises a one-line ImportError naming it."""
    install_other(site, "agents", {"agents/__init__.py": FOREIGN_INIT})
    done = python(site, "-c", "import agents.memory")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(
        f"ImportError: kvmemory's install is broken: {site / 'agents' / '__init__.py'} belongs to agents 0.2.0."
    )


def test_removed_agents_init_is_reported(site: Path) -> None:
    """An agents/__init__.py removed with another distribution is reported by import and command."""
    (site / "agents" / "__init__.py").unlink()
    for args in (["-c", "import agents.memory"], ["-m", "kvmemory", "--help"]):
        done = python(site, *args)
        assert done.returncode == 1
        assert f"{site / 'agents' / '__init__.py'} is missing" in done.stderr.splitlines()[-1]


def test_missing_memory_package_is_reported(site: Path) -> None:
    """A missing agents/memory package is named by the command instead of an ImportError."""
    shutil.rmtree(site / "agents" / "memory")
    done = python(site, "-m", "kvmemory", "--help")
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"kvmemory: error: kvmemory's install is broken: {site / 'agents' / 'memory' / '__init__.py'} is missing"
    )


OPENAI_AGENTS_INIT = (
    '"""openai-agents\' package, as it starts."""\nfrom .agent import Agent  # noqa\n'
)


def test_import_under_openai_agents_init_names_it_before_its_import_fails(site: Path) -> None:
    """openai-agents installed after kvmemory: its __init__ imports agents.agent, which is kvmemory's and says so."""
    files = {
        "agents/__init__.py": OPENAI_AGENTS_INIT,
        "agents/agent.py": "Agent = 1\n",
        "agents/memory/__init__.py": '"""openai-agents\' sessions."""\n',
    }
    install_other(site, "openai-agents", files)
    for statement in (
        "import agents",
        "import agents.memory",
        "from agents.memory.memory import Memory",
    ):
        done = python(site, "-c", statement)
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1].startswith(
            f"ImportError: kvmemory's install is broken: {site / 'agents' / '__init__.py'} "
            "belongs to openai-agents 0.2.0."
        )


def test_import_beside_another_distributions_files_names_it(site: Path) -> None:
    """openai-agents installed before kvmemory: kvmemory's __init__ runs, finds files its RECORD does not list, names them."""
    record_kvmemory(site)
    install_other(site, "openai-agents", {"agents/agent.py": "Agent = 1\n", "agents/run.py": ""})
    for args in (["-c", "import agents.memory"], ["-m", "kvmemory", "--help"]):
        done = python(site, *args)
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1].endswith(
            f"kvmemory's install is broken: {site / 'agents'} also holds files of openai-agents 0.2.0 "
            "(agent.py, run.py). kvmemory shares the import name 'agents' with openai-agents and an older "
            "package named agents, so it cannot be installed beside either: give kvmemory a virtual "
            "environment of its own, or run: pip uninstall openai-agents, then: pip install --force-reinstall kvmemory"
        )
