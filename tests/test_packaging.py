"""The distribution: `python -m build` makes a wheel and an sdist that pass `twine check` and install cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path | None = None) -> str:
    """Run a command, fail the test with its output when it fails, and return its stdout."""
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONPATH": ""},
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the sdist, then the wheel from it (as `python -m build` does), into a scratch folder."""
    if not os.environ.get("CI"):  # under CI a missing build tool is an error, not a skip
        pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    return out


def only(folder: Path, pattern: str) -> Path:
    (found,) = folder.glob(pattern)
    return found


def test_build_makes_a_wheel_and_an_sdist_that_pass_twine_check(dist: Path) -> None:
    """The wheel and the sdist are built and twine finds nothing wrong with their metadata."""
    wheel, sdist = only(dist, "kvmemory-*.whl"), only(dist, "kvmemory-*.tar.gz")
    output = run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    assert output.count("PASSED") == 2


def test_description_is_written_for_someone_who_installed_the_package(dist: Path) -> None:
    """The wheel's description says how to install and names no repository-only script or relative link."""
    with zipfile.ZipFile(only(dist, "kvmemory-*.whl")) as wheel:
        (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
        description = wheel.read(metadata).decode("utf-8").split("\n\n", 1)[1]
    assert "pip install" in description
    assert "scripts/" not in description
    assert "](" not in description  # no relative links: they break on the package index


def test_wheel_holds_the_package_and_its_entry_point(dist: Path) -> None:
    """The wheel has the agents package with its typing marker and page template, and kvmemory.py."""
    names = zipfile.ZipFile(only(dist, "kvmemory-*.whl")).namelist()
    for name in (
        "agents/py.typed",
        "agents/agent/timeline.html",
        "agents/memory/__init__.py",
        "kvmemory.py",
    ):
        assert name in names
    assert not [name for name in names if name.startswith(("tests/", "docs/", "examples/"))]


def test_sdist_holds_tests_docs_and_examples(dist: Path) -> None:
    """The sdist carries what is needed to test and document the release."""
    with tarfile.open(only(dist, "kvmemory-*.tar.gz")) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for name in (
        "pyproject.toml",
        "mkdocs.yml",
        "kvmemory.py",
        "tests/conftest.py",
        "docs/index.md",
    ):
        assert name in names
    assert "examples/ufo_two_agents.py" in names


def test_wheel_installs_and_runs_in_a_clean_environment(dist: Path, tmp_path: Path) -> None:
    """Installed alone in a fresh virtual environment, the wheel runs the example and kvmemory --help."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", only(dist, "kvmemory-*.whl"))
    installed = run(python, "-c", "import agents, sys; print(agents.__file__)", cwd=tmp_path)
    assert installed.startswith(str(env_dir))
    assert run(env_dir / "bin" / "kvmemory", "--help").startswith("usage: kvmemory")
    work = tmp_path / "work"
    work.mkdir()
    output = run(python, ROOT / "examples" / "ufo_two_agents.py", work / "run.json", cwd=work)
    assert "Exported 9 items to" in output
    assert (work / "run.json").exists()


# kvmemory beside openai-agents: both install a package named `agents` into one folder.
# Each order is tested in a real virtual environment. openai-agents and its
# dependencies are downloaded once from the package index pip is configured with,
# then installed from that folder, so the two environments cost no second download.
IMPORTS = (
    "import agents",
    "import agents.memory",
    "from agents.memory.memory import Memory, MemoryItem",
    "import agents.integrations.ufo",
)


@pytest.fixture(scope="module")
def clash_wheels(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a folder with kvmemory's wheel, openai-agents and all their dependencies as wheels."""
    folder = tmp_path_factory.mktemp("wheels")
    wheel = only(dist, "kvmemory-*.whl")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--dest",
            str(folder),
            str(wheel),
            "openai-agents",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONPATH": ""},
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        message = f"openai-agents cannot be downloaded from the package index pip is configured with: {why}"
        if os.environ.get("CI"):  # under CI the clash must be tested, not skipped
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="module", params=["kvmemory first", "openai-agents first"])
def clash_env(
    request: pytest.FixtureRequest, clash_wheels: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Return a virtual environment with kvmemory and openai-agents installed, in the order of the parameter."""
    env_dir = tmp_path_factory.mktemp("clash") / "venv"
    venv.create(env_dir, with_pip=True)
    wheel = only(clash_wheels, "kvmemory-*.whl")
    order = (
        [wheel, "openai-agents"] if request.param == "kvmemory first" else ["openai-agents", wheel]
    )
    for what in order:
        run(
            env_dir / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            clash_wheels,
            what,
        )
    return env_dir


def failure(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command that must fail and return what it did."""
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 1, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.parametrize("statement", IMPORTS)
def test_import_beside_openai_agents_names_the_clash_in_one_line(
    clash_env: Path, statement: str, tmp_path: Path
) -> None:
    """In either install order, every import of kvmemory's package fails with one line naming openai-agents and the fix."""
    done = failure(clash_env / "bin" / "python", "-c", statement, cwd=tmp_path)
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"ImportError: kvmemory's install is broken: {clash_env}")
    assert "openai-agents 0." in last
    assert last.endswith(
        "or run: pip uninstall openai-agents, then: pip install --force-reinstall kvmemory"
    )


def test_command_beside_openai_agents_names_the_clash_in_one_line(
    clash_env: Path, tmp_path: Path
) -> None:
    """In either install order, the kvmemory command prints the same one line and exits 1."""
    done = failure(clash_env / "bin" / "kvmemory", "--version", cwd=tmp_path)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("kvmemory: error: kvmemory's install is broken:")
    assert "openai-agents 0." in done.stderr


def test_the_fix_the_clash_line_names_restores_kvmemory(
    clash_env: Path, clash_wheels: Path, tmp_path: Path
) -> None:
    """Uninstalling openai-agents and reinstalling kvmemory, as the line says, makes the imports work again.

    Runs after the tests above on the same environment (it changes the environment).
    """
    python = clash_env / "bin" / "python"
    run(python, "-m", "pip", "uninstall", "--quiet", "--yes", "openai-agents")
    wheel = only(clash_wheels, "kvmemory-*.whl")
    run(
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-index",
        "--force-reinstall",
        "--no-deps",
        wheel,
    )
    for statement in IMPORTS:
        run(python, "-c", statement, cwd=tmp_path)
    assert run(clash_env / "bin" / "kvmemory", "--version", cwd=tmp_path).startswith("kvmemory ")
