"""`make upgrade TEMPLATE=<path> REF=<ref>`, run as a user runs it, in a real clone of a small
template with the cloner's own commits in their room (tests/helpers/template_repos.py): the
engine's changes arrive, the cloner's files stay as they left them, deleted files stay deleted,
a file both sides changed stops with git's markers and loses nothing, and every refusal is one
line that changes nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.template_repos import (
    ENGINE_V2,
    PROJECT,
    V1,
    clone_with_project,
    commit,
    environment,
    files,
    git,
    make_template,
    own_lines,
    release,
    shipped,
    state,
    upgrade,
)

ROOM = ("src/project/", "conf/")


@pytest.fixture
def template(tmp_path: Path) -> Path:
    return make_template(tmp_path / "template")


@pytest.fixture
def clone(template: Path, tmp_path: Path) -> Path:
    return clone_with_project(template, tmp_path / "clone")


def room(repo: Path) -> dict[str, bytes]:
    return {name: data for name, data in files(repo).items() if name.startswith(ROOM)}


def assert_engine_is_the_release(clone: Path) -> None:
    for name, text in ENGINE_V2.items():
        if text is None:
            assert not (clone / name).exists(), name
        else:
            assert (clone / name).read_text() == text, name
    # and committed, not just in the work tree
    assert set(git(clone, "ls-files", "src/trainwell").split()) == {
        "src/trainwell/__init__.py", "src/trainwell/engine.py", "src/trainwell/guard.py",
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["tag", "branch", "commit", "remote"])
def test_the_engines_changes_arrive_and_the_cloners_room_stays_as_it_was(
    template: Path, clone: Path, kind: str
) -> None:
    v1, before = git(clone, "rev-parse", "v1"), git(clone, "rev-parse", "HEAD")
    mine, refs = room(clone), git(clone, "for-each-ref", "--format=%(refname)")
    v2 = release(template, ENGINE_V2)
    ref = {"tag": "v2", "branch": "main", "commit": v2[:10], "remote": "v2"}[kind]
    source = "origin" if kind == "remote" else str(template)  # the remote `git clone` made

    proc = upgrade(clone, f"TEMPLATE={source}", f"REF={ref}")

    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert own_lines(proc.stdout) == [
        f"make upgrade: template {v1[:12]} -> {v2[:12]} ({ref} from {source})",
        f"make upgrade: merged as {git(clone, 'rev-parse', '--short=12', 'HEAD')}",
    ]
    assert_engine_is_the_release(clone)
    assert room(clone) == mine  # added, changed, deleted: all as the cloner left them
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    # the merge commit records where the clone came from and which release it took
    assert git(clone, "log", "-1", "--format=%P").split() == [before, v2]
    subject = git(clone, "log", "-1", "--format=%s")
    assert subject == f"Upgrade the template to {ref} ({v2[:12]}) from {source}"
    which = subprocess.run(  # docs/upgrading.md's line, as written
        'git log --merges -1 --format=%s --grep="^Upgrade the template"', shell=True, cwd=clone,
        env=environment(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert which.stdout == subject + "\n"
    # no refs left behind: the template's branches and tags fetched for the merge are gone again
    assert git(clone, "for-each-ref", "--format=%(refname)") == refs

    after = state(clone)
    again = upgrade(clone, f"TEMPLATE={source}", f"REF={ref}")
    assert again.returncode == 0, again.stderr
    assert own_lines(again.stdout) == [
        f"make upgrade: already up to date: {ref} (template {v2[:12]}) is in this clone"
    ]
    assert state(clone) == after


def test_files_the_cloner_deleted_stay_deleted_when_the_release_changed_them(
    template: Path, clone: Path
) -> None:
    mine = room(clone)
    # The release improves the example the cloner deleted (data.py) and its config (x.yaml).
    changed = {
        "src/project/data.py": "class Data:\n    size = 12\n",
        "conf/data/x.yaml": "size: 12\n",
    }
    v2 = release(template, {**ENGINE_V2, **changed})

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode == 0, proc.stderr
    kept = "make upgrade: kept deleted what you deleted and the release changed: "
    assert own_lines(proc.stdout)[1] == kept + "conf/data/x.yaml, src/project/data.py"
    assert len(own_lines(proc.stdout)) == 3 and proc.stderr == ""
    for name in changed:
        assert not (clone / name).exists(), name
        assert git(clone, "ls-tree", "HEAD", "--", name) == "", name
    assert room(clone) == mine
    assert_engine_is_the_release(clone)
    assert git(clone, "log", "-1", "--format=%P").split()[1] == v2
    assert git(clone, "log", "-1", "--format=%b") == (
        "Kept deleted (changed in the release): conf/data/x.yaml, src/project/data.py"
    )
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    # docs/upgrading.md: the release's version of one of them, taken after all
    git(clone, "checkout", "HEAD^2", "--", "src/project/data.py")
    assert (clone / "src/project/data.py").read_text() == changed["src/project/data.py"]


def test_a_file_both_sides_changed_stops_with_markers_and_nothing_of_the_cloners_is_lost(
    template: Path, clone: Path
) -> None:
    before, mine = state(clone), room(clone)
    v2 = release(
        template,
        {**ENGINE_V2, "conf/train.yaml": V1["conf/train.yaml"].replace("seed: 0", "seed: 1")},
    )

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0, proc.stdout  # make reports any failed recipe as 2
    (line,) = own_lines(proc.stderr)
    assert line.startswith("make upgrade: conflicts in conf/train.yaml (yours between"), line
    assert "git merge --abort to return to where you were" in line
    assert (clone / "conf/train.yaml").read_text() == (
        "defaults:\n  - data: mine\n\ntrainer:\n  epochs: 3\n\n"
        "<<<<<<< HEAD\nseed: 7\n=======\nseed: 1\n>>>>>>> template/v2\n"
    )
    # The rest of the release is staged, the rest of the room untouched.
    assert (clone / "src/trainwell/engine.py").read_text() == ENGINE_V2["src/trainwell/engine.py"]
    assert {k: v for k, v in room(clone).items() if k != "conf/train.yaml"} == {
        k: v for k, v in mine.items() if k != "conf/train.yaml"
    }
    # Run again mid-merge: refused, the half-done merge left as it is.
    stopped = state(clone)
    again = upgrade(clone, f"TEMPLATE={template}", "REF=v2")
    assert again.returncode != 0
    assert own_lines(again.stderr) == [
        "make upgrade: a merge is in progress: finish it (git add the fixed files, git commit) "
        "or undo it (git merge --abort), then run make upgrade again"
    ]
    assert state(clone) == stopped

    git(clone, "merge", "--abort")
    assert state(clone) == before

    # Resolved as docs/upgrading.md says: edit, git add, git commit (its message already written).
    assert upgrade(clone, f"TEMPLATE={template}", "REF=v2").returncode != 0
    resolved = (clone / "conf/train.yaml").read_text().replace("seed: 1\n", "")
    resolved = re.sub(r"<<<<<<< HEAD\n|=======\n|>>>>>>> template/v2\n", "", resolved)
    (clone / "conf/train.yaml").write_text(resolved)
    git(clone, "add", "conf/train.yaml")
    subprocess.run(["git", "commit"], cwd=clone, env={**environment(), "GIT_EDITOR": "true"},
                   check=True, capture_output=True)  # fmt: skip
    assert git(clone, "log", "-1", "--format=%s%n%P").split("\n") == [
        f"Upgrade the template to v2 ({v2[:12]}) from {template}",
        f"{before['head']} {v2}",
    ]
    assert room(clone) == mine  # seed: 7 kept
    assert (clone / "src/trainwell/engine.py").read_text() == ENGINE_V2["src/trainwell/engine.py"]


@pytest.mark.parametrize("change", ["modified", "staged"])
def test_uncommitted_changes_are_refused_in_one_line_and_nothing_changes(
    template: Path, clone: Path, change: str
) -> None:
    release(template, ENGINE_V2)
    if change == "modified":
        (clone / "src/project/model.py").write_text("class Model:\n    width = 32\n")
        name = "src/project/model.py"
    else:
        (clone / "src/project/extra.py").write_text("EXTRA = 1\n")
        git(clone, "add", "src/project/extra.py")
        name = "src/project/extra.py"
    before = state(clone)

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    assert own_lines(proc.stderr) == [
        f"make upgrade: uncommitted changes in {name}: commit them or put them aside "
        "(git stash), then run make upgrade again"
    ]
    assert own_lines(proc.stdout) == []
    assert state(clone) == before
    # As the line says: put them aside, run make upgrade again; they come back on top.
    (put_aside,) = re.findall(r"\((git stash)\)", own_lines(proc.stderr)[0])
    subprocess.run(put_aside, shell=True, cwd=clone, env=environment(), check=True)
    assert upgrade(clone, f"TEMPLATE={template}", "REF=v2").returncode == 0
    assert_engine_is_the_release(clone)
    git(clone, "stash", "pop")
    assert (clone / name).is_file() and name in git(clone, "status", "--porcelain")


@pytest.mark.parametrize(
    ("assignments", "expected"),
    [
        (("REF=v2",), r"TEMPLATE not given: make upgrade TEMPLATE=<git url or path> REF=<tag\|"),
        (("TEMPLATE={template}",), r"REF not given: make upgrade TEMPLATE="),
        (("TEMPLATE={template}-nowhere", "REF=v2"), r"cannot fetch TEMPLATE=\S+-nowhere: fatal: "),
        (
            ("TEMPLATE={template}", "REF=v9"),
            r"REF=v9 is not a tag, branch or commit of TEMPLATE=\S+ \(its newest tags: v2, v1\)$",
        ),
        (("TEMPLATE={template}", "REF=0123abc"), r"REF=0123abc is not a tag, branch or commit"),
        (
            ("TEMPLATE=origin", "REF=v9"),
            r"REF=v9 is not a tag, branch or commit of TEMPLATE=origin",
        ),
    ],
    ids=[
        "no-template",
        "no-ref",
        "unreachable-template",
        "unknown-ref",
        "unknown-commit",
        "unknown-ref-of-origin",  # and origin's remote-tracking branches stay where they were
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    template: Path, clone: Path, assignments: tuple[str, ...], expected: str
) -> None:
    release(template, ENGINE_V2)
    before = state(clone)

    proc = upgrade(clone, *(a.format(template=template) for a in assignments))

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert re.fullmatch(rf"make upgrade: {expected}.*", line), line
    assert state(clone) == before


def test_a_commit_of_the_clone_is_not_a_release(template: Path, clone: Path) -> None:
    release(template, ENGINE_V2)
    before = state(clone)
    own = git(clone, "rev-parse", "HEAD")[:10]  # the cloner's commit, not the template's

    proc = upgrade(clone, f"TEMPLATE={template}", f"REF={own}")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert line.startswith(f"make upgrade: REF={own} is not a tag, branch or commit of"), line
    assert state(clone) == before


def test_a_copied_clone_is_told_how_to_record_its_start_and_then_upgrades(
    tmp_path: Path,
) -> None:
    template = make_template(tmp_path / "the template")  # a space: quoted in the advice and by make
    copied = tmp_path / "copied"
    shutil.copytree(template, copied, ignore=shutil.ignore_patterns(".git"))
    git(copied, "init", "-q", "-b", "main")
    commit(copied, PROJECT, "my project, from a copy of the template")
    mine = room(copied)
    release(template, ENGINE_V2)
    before = state(copied)

    proc = upgrade(copied, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert line.startswith("make upgrade: this clone shares no history with the template"), line
    assert state(copied) == before
    # The line's advice, followed as written with the release the copy was made from:
    advice = re.search(r"`([^`]+)`", line)
    assert advice, line
    command = advice.group(1).replace("<that tag>", "v1")
    subprocess.run(command, shell=True, cwd=copied, env=environment(), check=True)
    assert room(copied) == mine  # recording the start changes no file

    proc = upgrade(copied, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode == 0, proc.stderr
    assert_engine_is_the_release(copied)
    assert room(copied) == mine


MOVED = (
    "from trainwell.data.base import Base\n\n\n"
    "class Digits(Base):\n"
    "    classes = 10\n"
    "    batch_size = 64\n"
    "    val_fraction = 0.1\n"
    "    seed = 0\n"
)


@pytest.mark.parametrize("cloner", ["edited", "deleted"])
def test_an_example_the_release_moves_into_the_room_takes_the_cloners_edit_or_deletion_along(
    tmp_path: Path, cloner: str
) -> None:
    old, new = "src/trainwell/data/digits.py", "src/project/data/digits.py"
    template = make_template(tmp_path / "template")
    commit(template, {old: MOVED}, "an example inside the engine")
    clone = clone_with_project(template, tmp_path / "clone")
    edited = MOVED.replace("batch_size = 64", "batch_size = 32")
    commit(clone, {old: edited if cloner == "edited" else None}, f"{cloner} the example")
    # The release moves the example into the room and changes its import.
    moved = MOVED.replace("from trainwell.data.base", "from project.data.base")
    release(template, {old: None, new: moved})

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode == 0, proc.stderr
    assert not (clone / old).exists()
    if cloner == "edited":  # git follows the move: the release's change and the cloner's, both
        assert (clone / new).read_text() == moved.replace("batch_size = 64", "batch_size = 32")
    else:
        assert not (clone / new).exists()
        assert own_lines(proc.stdout)[1].endswith(f"the release changed: {new}")
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_clone_from_before_make_upgrade_takes_the_script_once_as_the_docs_say(
    tmp_path: Path,
) -> None:
    template = make_template(tmp_path / "template", with_upgrade=False)
    clone = clone_with_project(template, tmp_path / "clone")
    mine = room(clone)
    release(template, {**ENGINE_V2, **shipped()})
    lines = (  # docs/upgrading.md's lines, with the template and the release filled in
        f"git fetch {template} v2",
        "git checkout FETCH_HEAD -- scripts/upgrade.py && git commit -m 'Take make upgrade'",
        f"python3 scripts/upgrade.py {template} v2",
    )
    for line in lines:
        proc = subprocess.run(
            line, shell=True, cwd=clone, env=environment(), capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{line}: {proc.stderr}"

    assert_engine_is_the_release(clone)
    assert room(clone) == mine
    assert files(clone)["Makefile"] == shipped()["Makefile"].encode()  # `make upgrade` from now on
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""


def test_an_untracked_file_the_release_would_overwrite_is_named_and_kept(
    template: Path, clone: Path
) -> None:
    release(template, ENGINE_V2)  # adds src/trainwell/guard.py
    (clone / "src/trainwell/guard.py").write_text("my own guard, not committed\n")
    before = state(clone)

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert line.startswith("make upgrade: git merge stopped before changing anything: "), line
    assert line.endswith("would be overwritten by merge: src/trainwell/guard.py"), line
    assert state(clone) == before


def test_a_git_without_the_users_name_is_told_what_to_set_before_anything_changes(
    template: Path, clone: Path
) -> None:
    release(template, ENGINE_V2)
    before = state(clone)
    anonymous = {k: v for k, v in environment().items() if not k.startswith("GIT_COMMITTER")}
    # no guessing from the host name: the identity comes from git's config or nowhere
    anonymous.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="user.useConfigOnly")
    anonymous.update(GIT_CONFIG_VALUE_0="true")

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2", env=anonymous)

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert line.startswith("make upgrade: git needs your name and email"), line
    assert state(clone) == before
    # Set as the line says, the same command merges, as that user.
    subprocess.run(line.split(": ", 2)[2], shell=True, cwd=clone, env=anonymous, check=True)
    assert upgrade(clone, f"TEMPLATE={template}", "REF=v2", env=anonymous).returncode == 0
    assert_engine_is_the_release(clone)
    assert git(clone, "log", "-1", "--format=%cn <%ce>") == "Your Name <you@example.com>"


def test_a_directory_that_is_no_git_repository_is_told_how_to_make_one(tmp_path: Path) -> None:
    template = make_template(tmp_path / "template")
    release(template, ENGINE_V2)
    copied = tmp_path / "copied"
    shutil.copytree(template, copied, ignore=shutil.ignore_patterns(".git"))

    proc = upgrade(copied, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert line.startswith(f"make upgrade: {copied} is not the root of a git repository"), line
    assert not (copied / ".git").exists()
    make_one = re.search(r"make one \((.+?)\), then see docs/upgrading\.md", line)
    assert make_one, line
    subprocess.run(make_one.group(1), shell=True, cwd=copied, env=environment(), check=True)
    assert git(copied, "status", "--porcelain") == ""  # everything committed
    # The next step, for a clone without history, is the one docs/upgrading.md gives: the
    # next line says it (test_a_copied_clone_is_told_how_to_record_its_start_and_then_upgrades).
    (line,) = own_lines(upgrade(copied, f"TEMPLATE={template}", "REF=v2").stderr)
    assert line.startswith("make upgrade: this clone shares no history with the template"), line


def test_a_leftover_ref_of_an_earlier_upgrade_is_deleted_as_named_and_the_upgrade_runs(
    template: Path, clone: Path
) -> None:
    release(template, ENGINE_V2)
    git(clone, "update-ref", "refs/template/v2", "HEAD")  # left by an upgrade that was killed
    before = state(clone)

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert state(clone) == before
    (command,) = re.findall(r"\((git update-ref -d \S+)\)", line)
    subprocess.run(command, shell=True, cwd=clone, env=environment(), check=True)
    assert upgrade(clone, f"TEMPLATE={template}", "REF=v2").returncode == 0
    assert_engine_is_the_release(clone)


def test_a_merge_the_cloners_hook_rejects_is_undone_and_named(template: Path, clone: Path) -> None:
    release(template, ENGINE_V2)
    hook = clone / ".git" / "hooks" / "pre-merge-commit"
    hook.write_text("#!/bin/sh\necho 'my lint: engine.py does not pass' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = state(clone)

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert line == (
        "make upgrade: git merge stopped before changing anything: my lint: engine.py does not pass"
    ), line
    assert state(clone) == before


@pytest.mark.parametrize("choice", ["git add", "git rm"])
def test_an_engine_file_you_changed_and_the_release_deleted_is_kept_or_dropped_as_named(
    template: Path, clone: Path, choice: str
) -> None:
    name = "src/trainwell/compat.py"
    commit(clone, {name: "def patched():\n    return 'mine'\n"}, "my patch of compat.py")
    release(template, ENGINE_V2)  # deletes compat.py

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert f"{name} (deleted by the release, changed by you: " in line, line
    named = re.findall(r"(git (?:add|rm)) to (keep|drop) it", line)
    assert named == [("git add", "keep"), ("git rm", "drop")], line
    assert "fix each, git add it and git commit" in line
    subprocess.run(f"{choice} {name}", shell=True, cwd=clone, env=environment(), check=True)
    subprocess.run(["git", "commit"], cwd=clone, env={**environment(), "GIT_EDITOR": "true"},
                   check=True, capture_output=True)  # fmt: skip
    assert (clone / name).exists() == (choice == "git add")
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    assert (clone / "src/trainwell/guard.py").read_text() == ENGINE_V2["src/trainwell/guard.py"]


@pytest.mark.parametrize("way", ["git commit", "git merge --abort"])
def test_a_merge_commit_a_hook_refused_is_finished_or_undone_as_named(
    template: Path, clone: Path, way: str
) -> None:
    release(template, {**ENGINE_V2, "src/project/data.py": "class Data:\n    size = 12\n"})
    hook = clone / ".git" / "hooks" / "commit-msg"
    hook.write_text("#!/bin/sh\necho 'my hook: no' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = state(clone)

    proc = upgrade(clone, f"TEMPLATE={template}", "REF=v2")

    assert proc.returncode != 0
    (line,) = own_lines(proc.stderr)
    assert "the merge is staged but git commit failed: my hook: no" in line, line
    named = re.search(r"; (git commit) to finish, or (git merge --abort) to return", line)
    assert named, line
    hook.unlink()  # the hook's complaint dealt with
    command = named.group(1) if way == "git commit" else named.group(2)
    subprocess.run(command, shell=True, cwd=clone, check=True, capture_output=True,
                   env={**environment(), "GIT_EDITOR": "true"})  # fmt: skip
    if way == "git commit":
        assert_engine_is_the_release(clone)
        assert not (clone / "src/project/data.py").exists()  # the cloner's deletion stands
    else:
        assert state(clone) == before  # where the clone was before the upgrade
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
