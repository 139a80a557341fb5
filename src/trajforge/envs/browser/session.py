"""One episode's page: a fresh browser context, its observation (page tree and, when asked, a
screenshot) and the GUI actions carried out on it.

Everything here runs on the browser slot's thread (Playwright's sync API). An action that
cannot be carried out (no element with that id, an element that does not take it) is one line
the model reads, never an exception; only a browser that died under it raises.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from playwright.sync_api import Browser, BrowserContext, CDPSession, Locator, Page
from playwright.sync_api import Error as PlaywrightError

from trajforge.envs.browser.axtree import BID_ATTRIBUTE, page_tree
from trajforge.envs.browser.chromium import first_line
from trajforge.envs.gui.actions import (
    Click,
    ClickAt,
    Done,
    Fill,
    GuiAction,
    Press,
    Scroll,
    Select,
    TypeText,
)

# How long an action waits for its element to be actionable before it is refused.
ACTION_TIMEOUT_MS = 2_000
NAVIGATION_TIMEOUT_MS = 15_000
OK = "ok"


@dataclass(frozen=True)
class Viewport:
    width: int
    height: int


class ActionFailed(Exception):
    """An action the page did not take; its message is one line."""


@dataclass
class PageSession:
    """A fresh context and page in ``browser``."""

    browser: Browser
    context: BrowserContext
    page: Page
    cdp: CDPSession

    @classmethod
    def open(cls, browser: Browser, viewport: Viewport) -> PageSession:
        context = browser.new_context(viewport={"width": viewport.width, "height": viewport.height})
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        page = context.new_page()
        return cls(browser, context, page, context.new_cdp_session(page))

    def tree(self) -> str:
        """The page's accessibility tree as text with element ids."""
        return page_tree(self.page, self.cdp)

    def screenshot(self) -> bytes:
        """The viewport as PNG bytes."""
        return self.page.screenshot(type="png")

    def close(self) -> None:
        with contextlib.suppress(PlaywrightError):
            self.context.close()

    def act(self, action: GuiAction) -> str:
        """Carry out ``action``; ``ok`` or one line saying why it was not taken.

        Raises:
            PlaywrightError: the browser is gone (the episode is lost, not the policy's fault).
        """
        try:
            self._act(action)
        except ActionFailed as exc:
            return f"{action.name}: {exc}"
        except PlaywrightError as exc:
            if not self.browser.is_connected() or self.page.is_closed():
                raise
            return f"{action.name}: {first_line(exc)}"
        return OK

    def _element(self, bid: str) -> Locator:
        found = self.page.locator(f"[{BID_ATTRIBUTE}={_css_string(bid)}]")
        if found.count() == 0:
            raise ActionFailed(f"no element with id {bid!r} on the page")
        return found.first

    def _act(self, action: GuiAction) -> None:
        match action:
            case Click(element=bid):
                self._element(bid).click()
            case Fill(element=bid, text=text):
                self._element(bid).fill(text)
            case Select(element=bid, option=option):
                self._element(bid).select_option(option)
            case Press(key=key, element=bid):
                if bid is None:
                    self.page.keyboard.press(key)
                else:
                    self._element(bid).press(key)
            case Scroll(dx=dx, dy=dy, element=bid):
                if bid is None:
                    self.page.mouse.wheel(dx, dy)
                else:
                    self._element(bid).evaluate("(el, d) => el.scrollBy(d[0], d[1])", [dx, dy])
            case ClickAt(x=x, y=y):
                self.page.mouse.click(x, y)
            case TypeText(text=text):
                self.page.keyboard.type(text)
            case Done():
                pass


def _css_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
