"""``BrowserEnv``: one episode of a browser benchmark task as a trajforge ``Env``.

``reset`` leases a browser from the pool, opens a fresh context and starts the task; the
opening user message is the task's instruction and the page tree (element ids in BrowserGym's
conventions), with a screenshot part when ``screenshot`` is on. Each tool call is a GUI action
(``trajforge.envs.gui.actions``); its tool message says ``ok`` or ``Error: ...`` in one line (an
unknown element id, a malformed call), and the last one of a turn carries the new page. The
episode ends when the benchmark says it is done, on ``done``, or on a reply without a tool
call; the reward is the benchmark's own (0 while it has not judged the episode over).

A browser that crashes or hangs raises ``BrowserFailedError`` (an ``InfraError``): the episode
is lost to the infrastructure, the browser is replaced, other episodes go on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

from playwright.sync_api import Browser
from playwright.sync_api import Error as PlaywrightError

from trajforge.envs.base import Env, StepResult
from trajforge.envs.browser.benchmark import Benchmark, Episode, EpisodeStatus
from trajforge.envs.browser.chromium import Chromium, first_line
from trajforge.envs.browser.pagestate import PAGE_STATE
from trajforge.envs.browser.pool import BrowserFailedError, BrowserPool, BrowserSlot, shared_pool
from trajforge.envs.browser.session import OK, PageSession
from trajforge.envs.gui.actions import (
    PAGE_ACTIONS,
    ActionError,
    Done,
    GuiAction,
    action_specs,
    parse_action,
)
from trajforge.envs.tool_env import ERROR_PREFIX
from trajforge.schema import ImagePart, Message, Role, Task, TextPart

T = TypeVar("T")

SYSTEM_PROMPT = (
    "You operate a web page to do the task you are given. The page is shown as its "
    "accessibility tree, one element a line; [N] is the id of an element you can act on. "
    "Act with the tools; call done when the task is finished."
)
SKIPPED = "not carried out: the episode had already ended"


def _content(text: str, screenshot: bytes | None) -> str | list[TextPart | ImagePart]:
    if screenshot is None:
        return text
    return [TextPart(text=text), ImagePart.from_bytes(screenshot, "image/png")]


class BrowserEnv(Env):
    """A browser benchmark's episode on a pooled Chromium.

    Args:
        benchmark: The task family (MiniWoB++, BrowserGym).
        pool: The browsers to lease from (default: the process's shared pool).
        screenshot: Whether observations carry a screenshot part.
        record_screens: Whether the trajectory's metadata keeps the opening and the last
            screen as PNG data URLs (``screens``), for a report to show, without putting
            images in front of a text-only model.
        actions: The GUI actions offered (default: the page-tree agent's).
    """

    times_out_tools = True

    def __init__(
        self,
        benchmark: Benchmark,
        *,
        pool: BrowserPool | None = None,
        screenshot: bool = False,
        actions: Collection[str] = PAGE_ACTIONS,
        record_screens: bool = False,
    ) -> None:
        super().__init__()
        self.name = benchmark.name
        self.benchmark = benchmark
        self.screenshot = screenshot
        self.record_screens = record_screens
        self._screens: list[str] = []
        self.offered = tuple(actions)
        self.tools = action_specs(self.offered)
        self._pool = pool
        self._slot: BrowserSlot | None = None
        self._session: PageSession | None = None
        self._episode: Episode | None = None
        self._chromium: Chromium | None = None
        self._call_timeout_s: float | None = None

    @property
    def pool(self) -> BrowserPool:
        if self._pool is None:
            self._pool = shared_pool()
        return self._pool

    @property
    def call_timeout_s(self) -> float:
        """How long one browser call may take before the browser is deemed hung."""
        return self._call_timeout_s or self.pool.call_timeout_s

    def adopt_limits(self, *, max_turns: int | None, tool_timeout_s: float | None) -> None:
        self._call_timeout_s = tool_timeout_s or self._call_timeout_s

    async def _run(self, work: Callable[[PageSession], T]) -> T:
        slot, session, chromium = self._slot, self._session, self._chromium
        assert slot is not None and session is not None and chromium is not None, "reset() first"

        def guarded(_: Browser) -> T:
            # The slot replaces a dead browser before it runs the next call; this episode's
            # page died with the old one.
            if not chromium.alive():
                raise BrowserFailedError(f"browser {slot.index} died under the episode")
            try:
                return work(session)
            except PlaywrightError as exc:
                if not chromium.alive():
                    raise BrowserFailedError(
                        f"browser {slot.index} died under the episode: {first_line(exc)}"
                    ) from exc
                raise

        return await slot.run(guarded, self.call_timeout_s)

    async def _act(self, action: GuiAction) -> str:
        return await self._run(lambda session: session.act(action))

    async def _record_screen(self) -> None:
        if not self.record_screens:
            return
        try:
            shot = await self._run(lambda session: session.screenshot())
        except PlaywrightError:
            return  # a record for the report, never a reason to lose the episode (a slow page)
        # The opening screen stays first; each later one replaces the one before.
        self._screens[1:] = [ImagePart.from_bytes(shot, "image/png").data_url()]

    def episode_metadata(self) -> dict[str, object]:
        metadata: dict[str, object] = (
            {"screens": list(self._screens)} if self.record_screens else {}
        )
        reached = None if self._episode is None else self._episode.reached
        if reached is not None:
            metadata[PAGE_STATE] = reached
        return metadata

    def _page_text(self, session: PageSession) -> tuple[str, bytes | None]:
        shot = session.screenshot() if self.screenshot else None
        return f"Page:\n{session.tree()}", shot

    async def reset(self, task: Task) -> list[Message]:
        await self.close()
        slot = self._slot = await self.pool.acquire()

        def start(browser: Browser) -> tuple[PageSession, Episode, str, bytes | None]:
            self._chromium = slot.chromium
            session = PageSession.open(browser, self.benchmark.viewport)
            try:
                episode = self.benchmark.start(session, task)
                text, shot = self._page_text(session)
            except BaseException:
                session.close()
                raise
            return session, episode, text, shot

        self._session, episode, page, shot = await slot.run(start, self.call_timeout_s)
        self._episode = episode
        self._screens = []
        await self._record_screen()
        opening = f"Task: {episode.goal}\n\n{page}"
        return [
            Message(role=Role.SYSTEM, content=SYSTEM_PROMPT),
            Message(role=Role.USER, content=_content(opening, shot)),
        ]

    async def step(self, action: Message) -> StepResult:
        assert self._episode is not None, "reset() first"
        episode = self._episode
        if not action.tool_calls:
            final = await self._run(episode.final)
            return StepResult([], reward=final.reward, done=True, info=_info(final))
        results: list[str] = []
        status = EpisodeStatus(done=False, reward=0.0)
        ended = False
        for call in action.tool_calls:
            if ended:
                results.append(SKIPPED)
                continue
            try:
                parsed = parse_action(call, self.offered)
            except ActionError as exc:
                results.append(f"{ERROR_PREFIX} {exc}")
                continue
            outcome = OK if isinstance(parsed, Done) else await self._act(parsed)
            results.append(outcome if outcome == OK else f"{ERROR_PREFIX} {outcome}")
            judge = episode.final if isinstance(parsed, Done) else episode.status
            status = await self._run(judge)
            ended = status.done or isinstance(parsed, Done)
        shot = None
        if not ended:
            page, shot = await self._run(self._page_text)
            results[-1] = f"{results[-1]}\n\n{page}"
        messages = [
            Message(role=Role.TOOL, content=text, tool_call_id=call.id)
            for call, text in zip(action.tool_calls, results, strict=True)
        ]
        messages[-1] = messages[-1].model_copy(update={"content": _content(results[-1], shot)})
        await self._record_screen()
        return StepResult(messages, reward=status.reward, done=ended, info=_info(status))

    async def close(self) -> None:
        slot, session = self._slot, self._session
        self._slot, self._session, self._episode, self._chromium = None, None, None, None
        if slot is None:
            return
        try:
            if session is not None:
                await slot.run(lambda _: session.close(), self.call_timeout_s)
        except BrowserFailedError:
            pass  # the browser is gone with its context; the slot starts a fresh one
        finally:
            self.pool.release(slot)


def _info(status: EpisodeStatus) -> dict[str, object]:
    return {"benchmark_done": status.done, "reason": status.reason}
