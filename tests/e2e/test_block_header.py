"""Block commands answer with the block editor contract's header (seed 004), the CLI alike."""

from __future__ import annotations

import json

from tests.e2e.conftest import DaemonProcess


def test_block_commands_answer_with_the_header_and_a_snapshot_on_request(
    daemon: DaemonProcess,
) -> None:
    got = json.loads(daemon.cli("--json", "page", "get", "plan.md").stdout)["result"]
    para = next(b for b in got["blocks"] if b["type"] == "paragraph")
    ran = daemon.cli(
        "--json", "editor", "replace_block", "plan.md", "--block-id", para["id"],
        "--block", "Ship on Friday.", "--snapshot",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)["result"]
    assert result["document_id"] == got["documentId"]
    assert result["applied_command"] == "replace_block"
    assert result["changed_block_ids"] == [para["id"]]
    assert result["revision"] == daemon.git("rev-parse", "HEAD").strip()
    after = {"id": para["id"], "type": "paragraph", "text": "Ship on Friday."}
    assert result["snapshot"] == [after]
    audit = result["audit"]
    # (`actor_type` as the request sent it, as the commit's trailer says: the CLI sends `cli`)
    assert (audit["actor_type"], audit["command_name"], audit["target_block_id"]) == (
        "cli",
        "replace_block",
        para["id"],
    )
    printed = daemon.cli(
        "editor", "insert_block_after", "plan.md", "--after-block-id", para["id"],
        "--block", "Then rest.", "--snapshot",
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert "snapshot" in printed.stdout and "paragraph: Then rest." in printed.stdout
    plain = daemon.cli("--json", "editor", "delete_block", "plan.md", "--block-id", para["id"])
    assert "snapshot" not in json.loads(plain.stdout)["result"]
