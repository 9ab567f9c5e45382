"""A workspace whose ``.gitattributes`` filters files, through the running daemon.

``pointer`` stands in for Git LFS (the blob is a pointer naming the content's hash) and
``rot`` for git-crypt (the blob is the text scrambled). An editor's save must land in
history as ``git add`` stores it, ``git status`` must agree once idle, and agents must
neither read the filter's output as a page nor write bytes the filter never saw.
"""

from __future__ import annotations

import json
import subprocess
import time

from tests.e2e.conftest import DaemonProcess, fsck

POINTER = "sh -c 'printf \"pointer sha256:%s\\n\" $(sha256sum | cut -c1-64)'"
ROT13 = "tr A-Za-z N-ZA-Mn-za-m"


def configure(daemon: DaemonProcess) -> None:
    for key, value in (
        ("filter.pointer.clean", POINTER),
        ("filter.pointer.smudge", "cat"),
        ("filter.pointer.required", "true"),
        ("filter.rot.clean", ROT13),
        ("filter.rot.smudge", ROT13),
    ):
        daemon.git("config", key, value)
    (daemon.workspace / ".gitattributes").write_text(
        "*.png filter=pointer -text\nsecret/** filter=rot\n"
    )


def wait_until_idle_and_clean(daemon: DaemonProcess) -> None:
    """Until `git status --porcelain` is empty (the daemon committed and refreshed the index)."""
    deadline = time.monotonic() + 20
    status = ""
    while time.monotonic() < deadline:
        status = daemon.git("status", "--porcelain", "--untracked-files=all")
        if status == "":
            return
        time.sleep(0.1)
    raise AssertionError(f"git status stayed:\n{status}")


def call(daemon: DaemonProcess, token: str | None, tool: str, ref: str, **args) -> dict:
    client = daemon.client(token=token)
    _, resp = client.request("POST", "/v1/tools/call", client.envelope(tool, ref, args, False))
    return resp


def test_an_editor_save_of_a_filtered_file_is_committed_as_git_add_stores_it(
    daemon: DaemonProcess,
) -> None:
    configure(daemon)
    image = bytes(range(256)) * 8192  # 2 MB: over maxFileBytes, but its blob is a pointer
    (daemon.workspace / "photo.png").write_bytes(image)
    (daemon.workspace / "secret").mkdir()
    (daemon.workspace / "secret" / "diary.md").write_text("# Diary\n\nMet Alice.\n")
    wait_until_idle_and_clean(daemon)
    blob = daemon.git("cat-file", "-p", "HEAD:photo.png")
    assert blob.startswith("pointer sha256:") and len(blob) < 100
    assert daemon.git("show", "HEAD:secret/diary.md") == "# Qvnel\n\nZrg Nyvpr.\n"
    assert (daemon.workspace / "photo.png").read_bytes() == image
    assert fsck(daemon.workspace).returncode == 0
    # An edit goes through the filter again; nothing is committed twice.
    (daemon.workspace / "photo.png").write_bytes(image[::-1])
    wait_until_idle_and_clean(daemon)
    time.sleep(1.0)
    subjects = daemon.git("log", "--format=%s", "--", "photo.png").splitlines()
    assert len(subjects) == 2, subjects
    assert daemon.git("cat-file", "-p", "HEAD:photo.png") != blob
    # The person's own `git add` and commit of such a file is not answered by a commit.
    (daemon.workspace / "secret" / "diary.md").write_text("# Diary\n\nMet Bob.\n")
    subprocess.run(["git", "add", "-A"], cwd=daemon.workspace, check=True)
    subprocess.run(["git", "commit", "-qm", "mine"], cwd=daemon.workspace, check=False)
    wait_until_idle_and_clean(daemon)
    time.sleep(1.0)
    log = daemon.git("log", "--format=%s", "-3").splitlines()
    assert log[0] in ("mine", "external.edit: secret/diary.md"), log
    assert daemon.git("show", "HEAD:secret/diary.md") == "# Qvnel\n\nZrg Obo.\n"
    wait_until_idle_and_clean(daemon)


def test_agents_neither_read_nor_write_a_filtered_page(daemon: DaemonProcess) -> None:
    configure(daemon)
    (daemon.workspace / "secret").mkdir()
    (daemon.workspace / "secret" / "diary.md").write_text("# Diary\n\nMet Alice.\n")
    wait_until_idle_and_clean(daemon)
    head = daemon.git("rev-parse", "HEAD")

    read = call(daemon, None, "mnote.page.get", "secret/diary.md")
    assert not read["ok"] and read["error"]["code"] == "mnote_path_rejected", read
    assert "'rot' filter" in read["error"]["message"] and "editor" in read["error"]["hint"]
    made = call(daemon, None, "mnote.page.create", None, path="secret/new.md", content="# New\n")
    assert not made["ok"] and made["error"]["code"] == "mnote_path_rejected", made
    assert not (daemon.workspace / "secret" / "new.md").exists()

    # An agent granted only another folder is not told that the path exists.
    made = daemon.cli(
        "--json", "grant", "create", "--workspace", str(daemon.workspace),
        "--actor", "hermes", "--scope", "page.read", "--path", "projects/**",
    )  # fmt: skip
    token = json.loads(made.stdout)["token"]
    hidden = call(daemon, token, "mnote.page.get", "secret/diary.md")
    assert hidden["error"]["code"] == "mnote_tool_permission_denied", hidden

    assert daemon.git("rev-parse", "HEAD") == head
    assert daemon.git("show", "HEAD:secret/diary.md") == "# Qvnel\n\nZrg Nyvpr.\n"


def test_a_page_edited_by_agents_before_a_filter_covered_it_is_committed_in_its_batch(
    daemon: DaemonProcess,
) -> None:
    (daemon.workspace / "secret").mkdir()
    (daemon.workspace / "secret" / "diary.md").write_text("# Diary\n\nMet Alice.\n")
    wait_until_idle_and_clean(daemon)
    edit = call(
        daemon, None, "mnote.doc.markdown_edit", "secret/diary.md",
        operations=[{"search": "Alice", "replace": "Carol"}],
    )  # fmt: skip
    assert edit["ok"], edit  # (the page's block ids are now carried from version to version)
    configure(daemon)
    time.sleep(1.1)  # (reads see a change to Git's config within a second)
    (daemon.workspace / "secret" / "diary.md").write_text("# Diary\n\nMet Bob.\n")
    wait_until_idle_and_clean(daemon)
    assert daemon.git("show", "HEAD:secret/diary.md") == "# Qvnel\n\nZrg Obo.\n"
    time.sleep(0.5)
    edit = call(
        daemon, None, "mnote.doc.markdown_edit", "plan.md",
        operations=[{"search": "Monday", "replace": "Friday"}],
    )  # fmt: skip
    assert edit["ok"], edit
    log = daemon.log.read_text()
    assert "sink_failed" not in log and "Traceback" not in log and "ERROR" not in log, log


def test_an_editor_save_with_crlf_is_committed_with_the_line_endings_git_stores(
    daemon: DaemonProcess,
) -> None:
    (daemon.workspace / ".gitattributes").write_text("*.md text eol=lf\n")
    (daemon.workspace / "windows.md").write_bytes(b"# From Windows\r\n\r\nSaved with CRLF.\r\n")
    wait_until_idle_and_clean(daemon)
    assert daemon.git("show", "HEAD:windows.md") == "# From Windows\n\nSaved with CRLF.\n"
    page = call(daemon, None, "mnote.page.get", "windows.md")
    assert page["ok"] and page["result"]["title"] == "From Windows", page
    # The person's own commit of the file is not answered by a commit of its CRLF.
    (daemon.workspace / "windows.md").write_bytes(b"# From Windows\r\n\r\nEdited.\r\n")
    subprocess.run(["git", "add", "-A"], cwd=daemon.workspace, check=True)
    subprocess.run(["git", "commit", "-qm", "mine"], cwd=daemon.workspace, check=False)
    wait_until_idle_and_clean(daemon)
    time.sleep(1.0)
    assert daemon.git("show", "HEAD:windows.md") == "# From Windows\n\nEdited.\n"
    wait_until_idle_and_clean(daemon)


def test_agents_write_the_line_endings_a_checkout_writes(daemon: DaemonProcess) -> None:
    """Under `eol=crlf` (or `core.autocrlf=true`) an agent's edit turned a whole CRLF file
    into LF on disk; a page an agent sent with CRLF where Git stores LF stayed modified for
    `git status`."""
    (daemon.workspace / ".gitattributes").write_text("win/*.md text eol=crlf\n*.md text\n")
    (daemon.workspace / "win").mkdir()
    (daemon.workspace / "win" / "note.md").write_bytes(b"# Note\r\n\r\nFirst line.\r\n")
    daemon.wait_idle_clean()
    commits = int(daemon.git("rev-list", "--count", "HEAD"))

    edit = call(
        daemon, None, "mnote.doc.markdown_edit", "win/note.md",
        operations=[{"search": "First line.", "replace": "First line, edited."}],
    )  # fmt: skip
    assert edit["ok"], edit
    made = call(daemon, None, "mnote.page.create", None, path="win/new.md", content="# New\n\nA.\n")
    assert made["ok"], made
    sent = call(
        daemon, None, "mnote.page.create", None, path="unix.md", content="# Sent\r\n\r\nCRLF.\r\n"
    )
    assert sent["ok"], sent
    daemon.wait_idle_clean()
    time.sleep(1.0)  # (an own write taken for an editor's would be committed by now)

    assert (daemon.workspace / "win" / "note.md").read_bytes() == (
        b"# Note\r\n\r\nFirst line, edited.\r\n"
    )
    assert (daemon.workspace / "win" / "new.md").read_bytes() == b"# New\r\n\r\nA.\r\n"
    assert (daemon.workspace / "unix.md").read_bytes() == b"# Sent\n\nCRLF.\n"
    assert daemon.git("show", "HEAD:win/note.md") == "# Note\n\nFirst line, edited.\n"
    assert daemon.git("show", "HEAD:unix.md") == "# Sent\n\nCRLF.\n"
    assert int(daemon.git("rev-list", "--count", "HEAD")) == commits + 3  # one per command
    assert daemon.git("status", "--porcelain", "--untracked-files=all") == ""
    page = call(daemon, None, "mnote.page.get", "win/note.md")
    assert page["ok"] and page["result"]["title"] == "Note", page
