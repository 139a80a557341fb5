"""Terminal rendering: one trajectory (a header, one Rich panel per message, then the verdicts)
and listings that fit the terminal's width."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, JustifyMethod
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trajforge.schema import Message, Role, Trajectory, image_label

_ROLE_STYLE = {Role.SYSTEM: "dim", Role.USER: "cyan", Role.ASSISTANT: "green", Role.TOOL: "yellow"}
_MAX_TOOL_RESULT = 2000
_UNBOUNDED = 1_000_000


def fitted_table(
    console: Console,
    title: str,
    columns: Sequence[tuple[str, JustifyMethod]],
    rows: Sequence[Sequence[str]],
    drop_order: Sequence[str],
) -> tuple[Table, list[str]]:
    """A table of ``rows`` whose cells are never wrapped nor cut, and the columns it leaves out.

    While the table is wider than the console, the next column of ``drop_order`` is left out:
    a listing missing its least useful columns reads better than one whose every cell ends in
    an ellipsis. Only if it is still too wide once all of them are gone does Rich shrink cells.
    """
    hidden: list[str] = []
    pending = list(drop_order)
    while True:
        table = Table(
            title=title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
        kept = [k for k, (name, _) in enumerate(columns) if name not in hidden]
        for k in kept:
            name, justify = columns[k]
            table.add_column(name, justify=justify, no_wrap=True)
        for row in rows:
            table.add_row(*(row[k] for k in kept))
        # Measured without the console's limit, which would clamp the width being tested.
        unbounded = console.options.update_width(_UNBOUNDED)
        if not pending or Measurement.get(console, unbounded, table).maximum <= console.width:
            return table, hidden
        hidden.append(pending.pop(0))


def render_trajectory(traj: Trajectory, console: Console) -> None:
    """Print the trajectory turn by turn, with tool calls, tool results, rewards and scores."""
    console.print(_header(traj))
    turn = 0
    for index, msg in enumerate(traj.messages):
        console.print(_message_panel(msg, index, turn))
        if msg.role is Role.ASSISTANT:
            turn += 1
    console.print(_outcome(traj))


def _header(traj: Trajectory) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("id", traj.id),
        ("run", traj.run_id or "-"),
        ("env", traj.env or traj.task.env or "-"),
        ("task", traj.task.id),
        (
            "group / sample",
            f"{traj.group_id or '-'} / {'-' if traj.sample_index is None else traj.sample_index}",
        ),
        ("model", traj.model or "-"),
        ("tools", ", ".join(t.name for t in traj.tools) or "-"),
        ("turns / tokens", f"{traj.num_turns} / {traj.num_tokens}"),
    ]
    if traj.task.answer is not None:
        rows.append(("answer", json.dumps(traj.task.answer, default=str)))
    for key, value in rows:
        grid.add_row(key, escape(str(value)))
    return Panel(grid, title="trajectory", title_align="left")


def _message_panel(msg: Message, index: int, turn: int) -> Panel:
    parts: list[Text | Table] = []
    if msg.reasoning:
        parts.append(Text(msg.reasoning, style="italic dim"))
    content = msg.text
    if msg.role is Role.TOOL and len(content) > _MAX_TOOL_RESULT:
        content = (
            content[:_MAX_TOOL_RESULT]
            + f"\n... ({len(msg.text) - _MAX_TOOL_RESULT} more characters)"
        )
    if content:
        parts.append(Text(content))
    for image in msg.images:
        parts.append(Text(image_label(image), style="dim"))
    for call in msg.tool_calls:
        line = Text("→ ", style="bold magenta")
        line.append(f"{call.name or '?'}", style="bold magenta")
        if call.parse_error is not None:
            line.append(f"  unparsable call: {call.parse_error}", style="red")
            if call.raw:
                line.append(f"\n  {call.raw}", style="dim")
        else:
            line.append(json.dumps(call.arguments, ensure_ascii=False, default=str))
        line.append(f"  [{call.id}]", style="dim")
        parts.append(line)
    title = f"[{_ROLE_STYLE[msg.role]}]{msg.role.value}[/]"
    if msg.role is Role.ASSISTANT:
        title += f" · turn {turn}"
    if msg.role is Role.TOOL:
        title += f" · {escape(msg.name or '')} ← {escape(msg.tool_call_id or '')}"
    notes = [f"#{index}"]
    if msg.token_ids is not None:
        notes.append(f"{len(msg.token_ids)} tokens")
    if msg.reward is not None:
        notes.append(f"reward {msg.reward:g}")
    if msg.timing is not None:
        notes.append(f"{msg.timing.duration_s:.2f}s")
    return Panel(
        Group(*parts) if parts else Text("(empty)", style="dim"),
        title=title,
        title_align="left",
        subtitle=" · ".join(notes),
        subtitle_align="right",
        border_style=_ROLE_STYLE[msg.role],
    )


def _outcome(traj: Trajectory) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    out = traj.outcome
    grid.add_row("status", out.status.value)
    grid.add_row("reward", "-" if out.reward is None else f"{out.reward:g}")
    if out.reason:
        grid.add_row("reason", escape(out.reason))
    if out.error:
        grid.add_row("error", Text(out.error, style="red"))
    for score in traj.scores:
        value = f"{score.value:g}" if score.value is not None else f"error: {score.error}"
        by = score.evaluator.name or score.evaluator.kind.value
        detail = f" — {score.explanation}" if score.explanation else ""
        grid.add_row(f"score {escape(score.name)}", escape(f"{value} ({by}){detail}"))
    usage = traj.usage
    grid.add_row(
        "usage",
        f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens, "
        f"{usage.tool_calls} tool calls, {usage.wall_time_s:.2f}s",
    )
    style = "green" if out.status.value == "ok" else "red"
    return Panel(grid, title="outcome", title_align="left", border_style=style)
