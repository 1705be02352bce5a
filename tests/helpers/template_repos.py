"""A small template repository and a cloner's clone of it, made with real git in a temporary
directory, for the tests of `make upgrade`: the template's shape (an engine under src/trainwell/,
the cloner's room under src/project/ and conf/, the Makefile and scripts/upgrade.py of this
checkout), tagged v1, cloned, and a cloner's project committed on top."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers.config import REPO

V1 = {
    "src/trainwell/__init__.py": "",
    "src/trainwell/engine.py": "def step(x):\n    return x + 1\n",
    "src/trainwell/compat.py": "PATCHES = ['old-lightning']\n",
    "src/project/__init__.py": "",
    "src/project/data.py": "class Data:\n    size = 10\n",
    "src/project/model.py": "class Model:\n    width = 8\n",
    "conf/data/x.yaml": "_target_: project.data.Data\nsize: 10\n",
    "conf/train.yaml": "defaults:\n  - data: x\n\ntrainer:\n  epochs: 3\n\nseed: 0\n",
}
COPIED = ("Makefile", "scripts/upgrade.py")  # the upgrade as this checkout ships it
# What a cloner does in their first week: their own datamodule in place of the example's, a wider
# model, another seed in the top-level config. None (here and below): the file is deleted.
PROJECT: dict[str, str | None] = {
    "src/project/mine.py": "class MyData:\n    size = 99\n",
    "conf/data/mine.yaml": "_target_: project.mine.MyData\n",
    "src/project/model.py": "class Model:\n    width = 16\n",
    "conf/train.yaml": "defaults:\n  - data: mine\n\ntrainer:\n  epochs: 3\n\nseed: 7\n",
    "src/project/data.py": None,
    "conf/data/x.yaml": None,
}
# The engine's part of a release: a fix, a new file, a workaround no longer needed.
ENGINE_V2: dict[str, str | None] = {
    "src/trainwell/engine.py": "def step(x):\n    return x + 2  # the fix\n",
    "src/trainwell/guard.py": "def guard():\n    return True\n",
    "src/trainwell/compat.py": None,
}
ENV_DROPPED = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TEMPLATE", "REF", "GIT_DIR", "GIT_WORK_TREE")


def environment() -> dict[str, str]:
    """No user or system git config (a conflict style of one's own would change the markers),
    a fixed identity, and nothing of an outer make."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROPPED}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="Cloner",
        GIT_AUTHOR_EMAIL="cloner@example.com", GIT_COMMITTER_NAME="Cloner",
        GIT_COMMITTER_EMAIL="cloner@example.com",
    )  # fmt: skip
    return env


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=repo, env=environment(), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def write(repo: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_template(path: Path, with_upgrade: bool = True) -> Path:
    """The template at v1: its files and this checkout's Makefile and upgrade script (or, without
    `with_upgrade`, a Makefile of a release before `make upgrade` existed), tagged v1."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, {**V1, **(shipped() if with_upgrade else {"Makefile": "train:\n\techo\n"})}, "v1")
    git(path, "tag", "v1")
    return path


def shipped() -> dict[str, str | None]:
    """The Makefile and upgrade script as this checkout ships them."""
    return {name: (REPO / name).read_text() for name in COPIED}


def release(template: Path, files: dict[str, str | None], tag: str = "v2") -> str:
    """A later release of the template, tagged; its commit."""
    sha = commit(template, files, f"template {tag}")
    git(template, "tag", "-a", tag, "-m", f"release {tag}")
    return sha


def clone_with_project(template: Path, path: Path) -> Path:
    """`git clone` of the template with the cloner's project committed on top."""
    subprocess.run(["git", "clone", "-q", str(template), str(path)], env=environment(), check=True)
    commit(path, PROJECT, "my project")
    return path


def upgrade(
    clone: Path, *assignments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`make upgrade TEMPLATE=... REF=...` as a user types it in the clone."""
    return subprocess.run(
        ["make", "upgrade", *assignments], cwd=clone, env=env or environment(),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def own_lines(stream: str) -> list[str]:
    """The lines of stdout or stderr without make's own report of a failed recipe."""
    return [line for line in stream.splitlines() if not line.startswith("make: *** ")]


def files(repo: Path) -> dict[str, bytes]:
    return {
        p.relative_to(repo).as_posix(): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }


def state(repo: Path) -> dict[str, object]:
    """Everything of a clone a command could change: files, index, refs, branch, merge state."""
    return {
        "files": files(repo),
        "index": git(repo, "ls-files", "--stage"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "refs": git(repo, "for-each-ref"),
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "-q", "HEAD"),
        "merging": (repo / ".git" / "MERGE_HEAD").exists(),
    }
