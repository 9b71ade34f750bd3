"""Another build of the package for a before/after run in one process tree: a checkout or a
git revision laid out under the import name, to put first on a child's PYTHONPATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("runtime", "actors", "codecs")
"""The code folders pyproject.toml's package-dir maps under `actorloop`."""


def linked_package(tree: Path, into: Path) -> Path:
    """`into`, holding an `actorloop` package whose folders link to `tree`'s code folders
    (what the editable install maps); first on PYTHONPATH, it wins over this checkout."""
    package = into / "actorloop"
    package.mkdir(parents=True)
    for name in PACKAGE_DIRS:
        (package / name).symlink_to((tree / name).resolve(), target_is_directory=True)
    return into


def baseline_package(spec: str, into: Path) -> tuple[Path, str]:
    """For PYTHONPATH, a folder whose `actorloop` is the code of `spec` — a checkout (a
    directory) or a revision of this repository (extracted with `git archive`) — and a
    label naming it."""
    tree = Path(spec)
    if tree.is_dir():
        head = _short_revision(tree, "HEAD")
        return linked_package(tree, into / "pkg"), f"{tree} ({head})" if head else str(tree)
    source = into / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", spec, *PACKAGE_DIRS], cwd=ROOT, check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    return linked_package(source, into / "pkg"), f"{spec} ({_short_revision(ROOT, spec)})"


def _short_revision(where: Path, revision: str) -> str:
    """`revision`'s short hash in the repository at `where` ("" when it is none)."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=where, capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else ""
