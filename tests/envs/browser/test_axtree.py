"""The page tree as text, from hand-made CDP accessibility nodes (no browser)."""

from __future__ import annotations

from typing import Any

from trajforge.envs.browser.axtree import find, flatten


def _node(
    node_id: str,
    role: str,
    name: str | None = None,
    children: tuple[str, ...] = (),
    bid: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    node: dict[str, Any] = {"nodeId": node_id, "role": {"value": role}, "childIds": list(children)}
    if name is not None:
        node["name"] = {"value": name}
    if bid is not None:
        node["properties"] = [{"name": "roledescription", "value": {"value": f"tfbid_{bid} "}}]
        node["description"] = {"value": f"tfbid_{bid} "}
    node.update(extra)
    return node


def test_elements_show_their_ids_values_and_flags_and_noise_is_left_out() -> None:
    nodes = [
        _node("1", "RootWebArea", "Form", ("2", "3", "9"),
              properties=[{"name": "focused", "value": {"value": True}},
                          {"name": "url", "value": {"value": "file:///x.html"}}]),
        _node("2", "textbox", "", ("10",), bid="4", value={"value": "Ann"}),
        _node("10", "generic", "", ("11",)),
        _node("11", "StaticText", "Ann"),
        _node("3", "generic", "", ("5", "6"), bid="5"),
        _node("5", "button", "Submit", ("7",), bid="6"),
        _node("7", "StaticText", "Submit", ("8",)),
        _node("8", "InlineTextBox", "Submit"),
        _node("6", "LineBreak", "\n"),
        _node("9", "checkbox", "", (), bid="9",
              properties=[{"name": "checked", "value": {"value": "false"}},
                          {"name": "focusable", "value": {"value": True}}]),
    ]  # fmt: skip
    assert flatten(nodes) == (
        "RootWebArea 'Form', focused\n"
        "\t[4] textbox '' value='Ann'\n"
        "\t[6] button 'Submit'\n"
        "\t[9] checkbox '', checked='false'"
    )


def test_a_text_inside_a_bare_element_carries_that_elements_id() -> None:
    nodes = [
        _node("1", "RootWebArea", "Links", ("2", "4", "6")),
        _node("2", "generic", "", ("3",), bid="14"),
        _node("3", "StaticText", "Facilisi."),
        _node("4", "paragraph", "", ("5",), bid="15"),
        _node("5", "StaticText", "plain text"),
        _node("6", "generic", "", ("7",), bid="16"),
        _node("7", "StaticText", "Links"),
    ]
    assert flatten(nodes) == (
        "RootWebArea 'Links'\n\t[14] StaticText 'Facilisi.'\n\t[15] paragraph ''\n\t\tStaticText 'plain text'\n\t[16] StaticText 'Links'"
    )


def test_the_page_s_own_aria_descriptions_survive_the_marks() -> None:
    nodes = [
        _node("1", "RootWebArea", "P", ("2",)),
        _node("2", "button", "Go", (), description={"value": "tfbid_3 opens the form"},
              properties=[{"name": "roledescription", "value": {"value": "tfbid_3 fancy button"}}]),
    ]  # fmt: skip
    assert flatten(nodes) == "RootWebArea 'P'\n\t[3] button 'Go', roledescription='fancy button'"
    assert nodes[1]["description"] == {"value": "opens the form"}


def test_an_empty_tree_is_empty_text() -> None:
    assert flatten([]) == ""


def test_find_reads_an_element_s_id_by_role_and_name() -> None:
    tree = "RootWebArea 'T', focused\n\t[4] textbox 'Name' value='it, is'\n\t[6] button \"O'K\", focused"
    assert find(tree, "textbox", "Name") == "4"
    assert find(tree, "button", "O'K") == "6"
    assert find(tree, "button", "Name") is None and find(tree, "RootWebArea", "T") is None
