"""The command router: a table of instructions in both languages, and the direct shortcut."""

from __future__ import annotations

import pytest

from tests.service.conftest import Harness

pytestmark = pytest.mark.twin


PAGE = """---
title: Plan
---
# Goals

Ship the beta on Monday.

## Risks

Budget risk is high.

- design review
- write docs

发布计划在周一。

预算风险很高。
"""

MD, OPS, TITLE = "mnote.doc.markdown_edit", "mnote.doc.apply_block_ops", "mnote.page.update_title"
CASES = [
    # (instruction, intent, tool or None for a Hermes run)
    ('replace "Monday" with "Friday"', "replace_text", MD),
    ("Replace 'Monday' with 'Friday'.", "replace_text", MD),
    ('please change "high" to "low"', "replace_text", MD),
    ("swap “beta” with “release”", "replace_text", MD),
    ('replace "e" with "x"', "replace_text", None),  # many matches
    ('replace "Tuesday" with "Friday"', "replace_text", None),  # no match
    ('delete "Budget risk is high."', "delete_block", OPS),
    ('remove "on Monday"', "delete_text", MD),
    ('delete "review"', "delete_text", MD),
    ('delete "s"', "delete_text", None),
    ('append "A new goal." after heading "Goals"', "append_after_heading", OPS),
    ('add "Mitigation plan." under "Risks"', "append_after_heading", OPS),
    ('append "x" after "Nowhere"', "append_after_heading", None),
    ('rename the title to "Launch plan"', "rename_title", TITLE),
    ('set the page title to "Plan B"', "rename_title", TITLE),
    ('turn "Budget risk is high." into a heading', "set_block_type", OPS),
    ('make "Ship the beta on Monday." a quote', "set_block_type", OPS),
    ('convert "Budget risk" into a list', "set_block_type", OPS),
    ('turn "design review" into a heading', "set_block_type", None),  # a list item
    ('move "Budget risk is high." after "Ship the beta on Monday."', "move_block", OPS),
    ('move "Goals" after "Risks"', "move_block", OPS),
    ('move "Nothing" after "Goals"', "move_block", None),
    ("Summarize this page", "complex", None),
    ("Make the tone more professional", "complex", None),
    ("把「Monday」替换为「Friday」", "replace_text", MD),
    ("把「周一」改成「周五」", "replace_text", MD),
    ("将「很高」替换成「很低」", "replace_text", MD),
    ("把「周三」改成「周五」", "replace_text", None),
    ("请把「风险」改为「危险」。", "replace_text", MD),
    ("把「e」替换为「x」", "replace_text", None),
    ("删除「预算风险很高。」", "delete_block", OPS),
    ("删掉「在周一」", "delete_text", MD),
    ("删除「不存在的内容」", "delete_text", None),
    ("在「Goals」后面添加「新目标」", "append_after_heading", OPS),
    ("在标题「Risks」下面添加段落「应对措施」", "append_after_heading", OPS),
    ("在「不存在」后面添加「x」", "append_after_heading", None),
    ("标题改为「发布计划」", "rename_title", TITLE),
    ("把标题改成「新计划」", "rename_title", TITLE),
    ("把「预算风险很高。」变成标题", "set_block_type", OPS),
    ("把「发布计划在周一。」变成列表", "set_block_type", OPS),
    ("把「发布计划在周一。」移到「预算风险很高。」后面", "move_block", OPS),
    ("把「write docs」移到「不存在」后面", "move_block", None),
    ("帮我总结一下这一页", "complex", None),
    ("把这段改得更专业", "complex", None),
]


@pytest.fixture
def page_doc(h: Harness) -> str:
    h.write_file("notes/route.md", PAGE)
    return h.doc("notes/route.md")


@pytest.mark.parametrize(("instruction", "intent", "tool"), CASES)
def test_route_table(
    h: Harness, page_doc: str, instruction: str, intent: str, tool: str | None
) -> None:
    resp = h.call("mnote.page_ai.route", documentId=page_doc, args={"instruction": instruction})
    assert resp["ok"], resp["error"]
    out = resp["result"]
    assert out["schema"] == "mnote.page_ai_command_route.v1"
    assert out["intent"] == intent, out
    assert out["requiresHermesRun"] is (tool is None), out["reason"]
    if tool is None:
        assert out["recommendedToolCall"] is None and out["reason"]
        return
    call = out["recommendedToolCall"]
    assert call["toolName"] == tool and call["documentId"] == page_doc
    # The recommendation is a valid call: its dry run succeeds through the executor.
    dry = h.write(tool, documentId=page_doc, dryRun=True, args=call["args"])
    assert dry["ok"], (instruction, dry["error"])
    assert dry["result"]["unifiedDiff"]


def test_table_is_large_and_bilingual() -> None:
    assert len(CASES) >= 40
    chinese = [c for c in CASES if any("\u4e00" <= ch <= "\u9fff" for ch in c[0])]
    assert len(chinese) >= 15 and len(CASES) - len(chinese) >= 15


def test_selection_limits_what_is_recommended(h: Harness, page_doc: str) -> None:
    blocks = h.call("mnote.page.get", documentId=page_doc)["result"]["blocks"]
    ship = next(b["id"] for b in blocks if b["text"].startswith("Ship"))
    inside = h.call(
        "mnote.page_ai.route",
        documentId=page_doc,
        args={
            "instruction": 'replace "Monday" with "Friday"',
            "scope": "selection",
            "blockIds": [ship],
        },
    )
    assert inside["result"]["recommendedToolCall"]["args"]["allowedTargetBlockIds"] == [ship]
    outside = h.call(
        "mnote.page_ai.route",
        documentId=page_doc,
        args={"instruction": 'replace "high" with "low"', "scope": "selection", "blockIds": [ship]},
    )
    assert outside["result"]["requiresHermesRun"] is True
    assert "outside" in outside["result"]["reason"]


def test_direct_shortcut_goes_through_the_executor(h: Harness, page_doc: str) -> None:
    route = h.call(
        "mnote.page_ai.route", documentId=page_doc, args={"instruction": "把「周一」改成「周五」"}
    )["result"]
    call = route["recommendedToolCall"]
    agent = h.agent("hermes")
    done = h.write(call["toolName"], agent, documentId=call["documentId"], args=call["args"])
    assert done["ok"] and done["audit"]["effect"] == "write"
    assert "发布计划在周五。" in (h.root / "notes/route.md").read_text()
    [last] = h.ws.find_command(command_id=done["audit"]["commandId"])
    assert last.commit == h.ws.head and last.trailers["Mnote-Tool"] == MD
    structural = h.call(
        "mnote.page_ai.route",
        documentId=page_doc,
        args={"instruction": 'move "Goals" after "Risks"'},
    )["result"]
    assert structural["requiresReview"] is False  # the owner asked; agents' block ops are reviewed
    by_agent = h.call(
        "mnote.page_ai.route",
        agent,
        documentId=page_doc,
        args={"instruction": 'move "Goals" after "Risks"'},
    )["result"]
    assert by_agent["requiresReview"] is True
    held = h.write(OPS, agent, documentId=page_doc, args=by_agent["recommendedToolCall"]["args"])
    assert held["result"]["state"] == "awaiting_user"


def test_disabled_tool_is_not_recommended(h: Harness, page_doc: str) -> None:
    config = h.root / ".mnote" / "config.toml"
    config.write_text(config.read_text().replace("disabledTools = []", f'disabledTools = ["{MD}"]'))
    h.ws.commit_external([".mnote/config.toml"])
    h.reopen()
    out = h.call(
        "mnote.page_ai.route",
        documentId=page_doc,
        args={"instruction": 'replace "Monday" with "Friday"'},
    )["result"]
    assert out["requiresHermesRun"] is True and "disabled" in out["reason"]
