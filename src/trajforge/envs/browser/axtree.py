"""The page as text: Chromium's accessibility tree with element ids, in BrowserGym's conventions.

Every element gets a ``bid`` attribute (a number, kept for the element's life, so ids stay
stable across steps); for the length of one snapshot the id is also written into the element's
ARIA role description, which is how it reaches the accessibility tree (BrowserGym's trick), and
then taken out again. The tree prints as BrowserGym's ``flatten_axtree_to_str`` does, one node a
line, tab-indented::

    RootWebArea 'Click Button Task', focused
    \t[13] button 'no'
    \t[14] textbox '' value='hi'
    \tStaticText 'erat enim ipsum'

Generic nodes without attributes, line breaks, a text's line boxes and static text that repeats
its parent's name or value are left out (a small model's context is short). A text whose element is such
a generic node (a ``<span>`` with a click handler, MiniWoB's links) carries that element's id,
so that it can be acted on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import CDPSession, Page

BID_ATTRIBUTE = "bid"
_MARK = "tfbid_"
# Beyond BrowserGym's lists, for a short context: a text's line boxes (its text again) and the
# page's URL.
IGNORED_ROLES = frozenset({"LineBreak", "InlineTextBox"})
IGNORED_PROPERTIES = frozenset(
    {"editable", "readonly", "level", "settable", "multiline", "invalid", "focusable", "url"}
)
FLAG_PROPERTIES = frozenset({"required", "focused", "atomic"})
_MARKED = re.compile(rf"^{_MARK}(\d+)\s?(.*)$", re.DOTALL)
# A name is printed as Python's repr: in double quotes when it holds a single quote.
_ELEMENT_LINE = re.compile(r"""^\t*\[(\w+)\] (\S+) (?:'(.*?)'|"(.*?)")(?: value=|, |$)""")
_VALUE = re.compile(r""" value=(?:'(.*?)'|"(.*?)")(?:, |$)""")
FIELD_ROLES = frozenset({"textbox", "checkbox", "radio", "combobox"})
"""The roles of the form fields an agent fills, ticks or chooses in."""

# Ids and live values into the DOM; the id into both ARIA descriptions (the role description
# reaches most nodes, the description the generic ones). The originals are kept to restore.
MARK_JS = r"""
(attr) => {
  if (window.__tf_next_bid === undefined) { window.__tf_next_bid = 0; }
  const seen = new Set();
  window.__tf_marked = [];
  for (const el of document.querySelectorAll('*')) {
    let bid = el.getAttribute(attr);
    if (bid === null || seen.has(bid)) {
      bid = String(window.__tf_next_bid++);
      el.setAttribute(attr, bid);
    }
    seen.add(bid);
    if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement
        || el instanceof HTMLSelectElement) {
      el.setAttribute('value', el.value);
    }
    const saved = [];
    for (const aria of ['aria-roledescription', 'aria-description']) {
      const old = el.getAttribute(aria);
      saved.push(old);
      el.setAttribute(aria, `MARK${bid} ${old === null ? '' : old}`);
    }
    window.__tf_marked.push([el, saved]);
  }
}
""".replace("MARK", _MARK)

UNMARK_JS = r"""
() => {
  for (const [el, saved] of window.__tf_marked || []) {
    ['aria-roledescription', 'aria-description'].forEach((aria, i) => {
      if (saved[i] === null) { el.removeAttribute(aria); } else { el.setAttribute(aria, saved[i]); }
    });
  }
  window.__tf_marked = [];
}
"""


def _unmarked(text: str) -> tuple[str | None, str]:
    """The id a marked ARIA string carries and the string as the page had it."""
    match = _MARKED.match(text)
    return (match.group(1), match.group(2)) if match else (None, text)


def _take_bid(node: dict[str, Any]) -> str | None:
    """The node's element id; removes the marks from its role description and description."""
    bid = None
    properties = node.get("properties", [])
    for prop in list(properties):
        if prop.get("name") == "roledescription":
            bid, rest = _unmarked(str(prop.get("value", {}).get("value", "")))
            if rest:
                prop["value"]["value"] = rest
            else:
                properties.remove(prop)
    if "description" in node:
        found, rest = _unmarked(str(node["description"].get("value", "")))
        bid = bid or found
        if rest:
            node["description"]["value"] = rest
        else:
            del node["description"]
    return bid


def _attributes(node: Mapping[str, Any]) -> list[str]:
    shown = []
    for prop in node.get("properties", []):
        name, value = prop.get("name"), prop.get("value", {}).get("value")
        if value is None or name in IGNORED_PROPERTIES:
            continue
        if name in FLAG_PROPERTIES:
            if value:
                shown.append(name)
        else:
            shown.append(f"{name}={value!r}")
    return shown


def _line(node: Mapping[str, Any], bid: str | None, attributes: list[str]) -> str:
    role, name = node["role"]["value"], node["name"]["value"]
    text = role if role == "generic" and not name else f"{role} {name.strip()!r}"
    if bid is not None:
        text = f"[{bid}] {text}"
    value = node.get("value", {}).get("value")
    if value is not None:
        text += f" value={value!r}"
    return ", ".join([text, *attributes])


def flatten(nodes: list[dict[str, Any]]) -> str:
    """The tree of CDP ``Accessibility.getFullAXTree`` nodes as indented lines (marks taken
    out of the nodes as it goes)."""
    if not nodes:
        return ""
    by_id = {node["nodeId"]: node for node in nodes}
    lines: list[str] = []
    # (node, depth, the parent's name, the value of the nearest ancestor shown, the id of a
    # generic parent left out): an explicit stack, since pages nest deeply.
    stack: list[tuple[dict[str, Any], int, str, str | None, str | None]] = [
        (nodes[0], 0, "", None, None)
    ]
    while stack:
        node, depth, parent_name, shown_value, inherited = stack.pop()
        role = node.get("role", {}).get("value", "")
        bid = _take_bid(node) or (inherited if role == "StaticText" else None)
        name = node.get("name", {}).get("value")
        shown = role not in IGNORED_ROLES and name is not None
        if shown:
            attributes = _attributes(node)
            if (role == "generic" and not attributes) or (
                role == "StaticText" and (name in parent_name or name == shown_value)
            ):
                shown = False
            else:
                lines.append("\t" * depth + _line(node, bid, attributes))
        child_depth = depth + 1 if shown else depth
        children = [
            by_id[c] for c in node.get("childIds", []) if c in by_id and c != node["nodeId"]
        ]
        # A text box's text is its value: shown once, also through the nodes left out under it.
        value = node.get("value", {}).get("value") if shown else shown_value
        passed = bid if role == "generic" and not shown and len(children) == 1 else None
        for child in reversed(children):
            stack.append((child, child_depth, name or "", value, passed))
    return "\n".join(lines)


def page_tree(page: Page, cdp: CDPSession) -> str:
    """The page's accessibility tree as text with element ids (see the module docstring)."""
    page.evaluate(MARK_JS, BID_ATTRIBUTE)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        page.evaluate(UNMARK_JS)
    return flatten(nodes)


def find(tree: str, role: str, name: str) -> str | None:
    """The id of the first element of ``role`` named ``name`` in a page tree's text (None if
    there is none): what a scripted expert reads a page with."""
    for line in tree.splitlines():
        match = _ELEMENT_LINE.match(line)
        if match and match.group(2) == role and name in (match.group(3), match.group(4)):
            return match.group(1)
    return None


@dataclass
class Element:
    """An element of a page tree with an id, as a line of the tree shows it."""

    bid: str
    role: str
    name: str
    value: str | None = None
    checked: bool = False
    options: list[str] = field(default_factory=list)
    """A list's (combobox's) options, in order."""


def elements(tree: str) -> list[Element]:
    """The elements with ids in a page tree's text, in page order; a list's options are kept
    with the list, not as elements of their own."""
    found: list[Element] = []
    listing: tuple[Element, int] | None = None
    for line in tree.splitlines():
        match = _ELEMENT_LINE.match(line)
        if match is None:
            continue
        depth = len(line) - len(line.lstrip("\t"))
        bid, role = match.group(1), match.group(2)
        name = match.group(3) if match.group(3) is not None else match.group(4)
        if role == "option" and listing is not None and depth > listing[1]:
            listing[0].options.append(name)
            continue
        value = _VALUE.search(line)
        shown = None if value is None else next(g for g in value.groups() if g is not None)
        found.append(Element(bid, role, name, shown, "checked='true'" in line))
        listing = (found[-1], depth) if role == "combobox" else None
    return found
