"""Bring a later release of the template into this clone:
`make upgrade TEMPLATE=<git url or path> REF=<tag|branch|commit>` (docs/upgrading.md).

A clone shares the template's history, so git merges the release from the last template commit
the clone contains: what the template changed since then arrives, what only you changed stays
as you left it, and a file both sides changed stops with git's conflict markers. A file you
deleted stays deleted, also when the release changed it. Refusals change nothing (one line,
exit 2); a conflict stops the merge half-way (one line, exit 1) and `git merge --abort` undoes it.

Needs git and any python3, not the project's environment.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The template's branches and tags are fetched under FETCHED, and the release is merged as
# template/<REF> (the name git writes on the conflict markers); both are removed before this
# script returns.
FETCHED = "refs/template-fetch"
USAGE = "make upgrade TEMPLATE=<git url or path> REF=<tag|branch|commit>"
NOT_PROMPTED = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}


class Refused(Exception):
    """A one-line reason to stop; nothing of the clone has changed."""


def git(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NOT_PROMPTED}  # an unreachable URL fails, it never asks for a password
    return subprocess.run(["git", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def git_out(*args: str) -> str:
    proc = git(*args)
    if proc.returncode != 0:
        raise Refused(f"git {args[0]} failed: {first_error(proc.stderr)}")
    return proc.stdout.strip()


def first_error(stderr: str) -> str:
    """git's first error, with the file names it lists below it (indented), on one line."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith(("fatal:", "error:"))), 0)
    if not lines:
        return "(no message)"
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        names.append(line.strip())
    return " ".join([lines[start].strip(), ", ".join(names)]).strip()


def check_clone() -> None:
    """The clone is a git repository of its own, with a commit and nothing uncommitted."""
    proc = git("rev-parse", "--show-toplevel")
    if proc.returncode != 0 or Path(proc.stdout.strip()).resolve() != ROOT:
        raise Refused(
            f"{ROOT} is not the root of a git repository: make one (git init && git add -A && "
            "git commit -m 'my project'), then see docs/upgrading.md for a clone without history"
        )
    if git("rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        raise Refused("this repository has no commit yet: commit your project first")
    if git("rev-parse", "--verify", "-q", "MERGE_HEAD").returncode == 0:
        raise Refused(
            "a merge is in progress: finish it (git add the fixed files, git commit) or undo it "
            "(git merge --abort), then run make upgrade again"
        )
    # tracked files changed or staged; untracked files are left to git, which never overwrites them
    changed = git("status", "--porcelain", "--untracked-files=no").stdout.splitlines()
    if changed:
        names = ", ".join(line[3:] for line in changed)
        raise Refused(
            f"uncommitted changes in {names}: commit them or put them aside (git stash), "
            "then run make upgrade again"
        )
    if git("var", "GIT_COMMITTER_IDENT").returncode != 0:
        raise Refused(
            "git needs your name and email for the merge commit: git config user.name 'Your Name' "
            "&& git config user.email you@example.com"
        )


def fetch(template: str) -> None:
    # --refmap= : a remote's name as TEMPLATE (origin) leaves its remote-tracking branches alone
    proc = git(
        "fetch", "--quiet", "--no-tags", "--refmap=", template,
        f"+refs/heads/*:{FETCHED}/heads/*", f"+refs/tags/*:{FETCHED}/tags/*",
    )  # fmt: skip
    if proc.returncode != 0:
        raise Refused(f"cannot fetch TEMPLATE={template}: {first_error(proc.stderr)}")


def resolve(ref: str, template: str) -> str:
    """The template commit `ref` names: a tag, else a branch, else a commit of the template."""
    for kind in ("tags", "heads"):
        proc = git("rev-parse", "--verify", "-q", f"{FETCHED}/{kind}/{ref}^{{commit}}")
        if proc.returncode == 0:
            return proc.stdout.strip()
    if re.fullmatch(r"[0-9a-fA-F]{4,40}", ref):
        proc = git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
        # a commit of this clone only (its own work) is not a release of the template
        if proc.returncode == 0 and git_out(
            "for-each-ref", "--contains", proc.stdout.strip(), FETCHED
        ):
            return proc.stdout.strip()
    tags = git_out(
        "for-each-ref", "--sort=-v:refname", "--count=5", "--format=%(refname:strip=3)",
        f"{FETCHED}/tags",
    ).split()  # fmt: skip
    known = f" (its newest tags: {', '.join(tags)})" if tags else " (it has no tags)"
    raise Refused(f"REF={ref} is not a tag, branch or commit of TEMPLATE={template}{known}")


def unmerged() -> dict[str, set[str]]:
    """Each conflicted path and the stages git holds for it: 1 the common version, 2 yours,
    3 the release's."""
    stages: dict[str, set[str]] = {}
    for entry in git_out("ls-files", "-u", "-z").split("\0"):
        if entry:
            info, path = entry.split("\t", 1)
            stages.setdefault(path, set()).add(info.split()[2])
    return stages


def merge(template: str, ref: str, release: str) -> int:
    base = git("merge-base", "HEAD", release)
    if base.returncode != 0:
        raise Refused(
            "this clone shares no history with the template (its files were copied, then git "
            "init): record once which release it started from, with `git fetch "
            f"{shlex.quote(template)} <that tag> && git merge --allow-unrelated-histories -s ours -m "
            "'Start from the template' FETCH_HEAD`, then run make upgrade again "
            "(docs/upgrading.md)"
        )
    old = base.stdout.strip()
    if git("merge-base", "--is-ancestor", release, "HEAD").returncode == 0:
        print(f"make upgrade: already up to date: {ref} (template {release[:12]}) is in this clone")
        return 0
    print(f"make upgrade: template {old[:12]} -> {release[:12]} ({ref} from {template})")
    message = f"Upgrade the template to {ref} ({release[:12]}) from {template}"
    label = "template/" + re.sub(r"[^\w./-]", "-", ref)
    if git("rev-parse", "--verify", "-q", f"refs/{label}").returncode == 0:
        raise Refused(
            f"refs/{label} exists already: delete it (git update-ref -d refs/{label}) or rename "
            "it, then run make upgrade again"
        )
    git_out("update-ref", f"refs/{label}", release)
    try:
        proc = git("merge", "--no-ff", "--no-edit", "-m", message, label)
    finally:
        git("update-ref", "-d", f"refs/{label}")
    stages = unmerged()
    if proc.returncode != 0 and not stages:
        if git("rev-parse", "--verify", "-q", "MERGE_HEAD").returncode == 0:
            git("merge", "--abort")
        raise Refused(f"git merge stopped before changing anything: {first_error(proc.stderr)}")
    # Gone on your side (no stage 2) and changed in the release: your deletion stands.
    deleted = sorted(path for path, s in stages.items() if "2" not in s)
    if deleted:
        git_out("rm", "--quiet", "--", *deleted)
        print(
            f"make upgrade: kept deleted what you deleted and the release changed: {', '.join(deleted)}"
        )
    conflicts = sorted(path for path in stages if path not in deleted)
    if conflicts:
        print(f"make upgrade: {conflict_line(conflicts, stages, label)}", file=sys.stderr)
        return 1
    if deleted:
        kept = "Kept deleted (changed in the release): " + ", ".join(deleted)
        done = git("commit", "--quiet", "--no-edit", "-m", message, "-m", kept)
        if done.returncode != 0:  # a commit hook, say: the merge stays staged, as git leaves it
            print(
                f"make upgrade: the merge is staged but git commit failed: "
                f"{first_error(done.stderr)}; git commit to finish, or git merge --abort to "
                "return to where you were",
                file=sys.stderr,
            )
            return 1
    print(f"make upgrade: merged as {git_out('rev-parse', '--short=12', 'HEAD')}")
    return 0


def conflict_line(conflicts: list[str], stages: dict[str, set[str]], label: str) -> str:
    marked = [path for path in conflicts if "3" in stages[path]]
    dropped = [path for path in conflicts if "3" not in stages[path]]
    parts = []
    if marked:
        parts.append(
            f"{', '.join(marked)} (yours between <<<<<<< HEAD and =======, the release's from "
            f"there to >>>>>>> {label})"
        )
    if dropped:
        parts.append(
            f"{', '.join(dropped)} (deleted by the release, changed by you: git add to keep it, "
            "git rm to drop it)"
        )
    return (
        f"conflicts in {' and '.join(parts)}: fix each, git add it and git commit, or "
        "git merge --abort to return to where you were"
    )


def main(template: str, ref: str) -> int:
    try:
        if not template.strip() or not ref.strip():
            missing = " and ".join(
                n for n, v in (("TEMPLATE", template), ("REF", ref)) if not v.strip()
            )
            raise Refused(f"{missing} not given: {USAGE}")
        check_clone()
        try:
            fetch(template)
            return merge(template, ref, resolve(ref, template))
        finally:
            for name in git_out("for-each-ref", "--format=%(refname)", FETCHED).splitlines():
                git("update-ref", "-d", name)
    except Refused as refused:
        print(f"make upgrade: {refused}", file=sys.stderr)
        return 2
    except FileNotFoundError:
        print("make upgrade: git is not installed (it needs git)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"make upgrade: usage: {USAGE}")
    sys.exit(main(sys.argv[1], sys.argv[2]))
