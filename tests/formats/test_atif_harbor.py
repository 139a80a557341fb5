"""ATIF against harbor's own models (harbor 0.26.0, run in its Python >= 3.12 side environment,
``make setup``'s ``.venv-harbor``): a document harbor's models write reads into trajforge with
its calls, observations, token ids and media, and what trajforge writes validates there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harbor_side import needs_harbor, run_harbor
from image_samples import image_trajectory, png_bytes
from trajforge.formats.atif import ATIF_VERSION, read_atif_file, to_atif
from trajforge.schema import Role
from trajforge.schema.synthetic import synthetic_trajectory

pytestmark = needs_harbor

WRITE = """
import json, sys
from harbor.models.trajectories import (
    Agent, Metrics, Observation, ObservationResult, Step, ToolCall, Trajectory)
from harbor.models.trajectories.content import AudioSource, ContentPart
bash = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
trajectory = Trajectory(
    session_id="run-7",
    agent=Agent(name="terminus-2", version="2.0", model_name="m", tool_definitions=[bash]),
    steps=[
        Step(step_id=1, source="system", message="You run shell commands."),
        Step(step_id=2, source="user", message=[
            ContentPart(type="text", text="Do what the recording says:"),
            ContentPart(type="audio", source=AudioSource(media_type="audio/wav", path="ask.wav")),
        ]),
        Step(step_id=3, source="agent", message="Listing.",
             tool_calls=[ToolCall(tool_call_id="c1", function_name="bash",
                                  arguments={"cmd": "ls"})],
             observation=Observation(results=[ObservationResult(source_call_id="c1",
                                                                content="a.txt")]),
             metrics=Metrics(prompt_tokens=3, completion_tokens=2, prompt_token_ids=[1, 2, 3],
                             completion_token_ids=[4, 5], logprobs=[-0.5, -0.25])),
        Step(step_id=4, source="agent", message="There is a.txt."),
    ],
)
print(json.dumps(trajectory.to_json_dict()))
"""

READ = """
import json, sys
from harbor.models.trajectories import Trajectory
for line in open(sys.argv[1]):
    doc = Trajectory.model_validate_json(line)
    print(json.dumps({
        "version": doc.schema_version,
        "sources": [s.source for s in doc.steps],
        "calls": [[c.function_name, c.arguments] for s in doc.steps for c in s.tool_calls or []],
        "results": [r.content for s in doc.steps for r in (s.observation.results if s.observation else [])],
        "completion_ids": [s.metrics.completion_token_ids for s in doc.steps if s.metrics],
    }))
"""


def test_a_document_harbor_writes_reads_with_its_calls_ids_and_media(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.json"
    path.write_text(run_harbor(WRITE))
    assert json.loads(path.read_text())["schema_version"] == "ATIF-v1.8"  # harbor's default
    (traj,) = read_atif_file(path)
    assert [m.role for m in traj.messages] == [
        Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]  # fmt: skip
    assert traj.messages[1].content == "Do what the recording says:\n[audio: ask.wav]"
    call = traj.messages[2].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("c1", "bash", {"cmd": "ls"})
    assert (traj.messages[3].tool_call_id, traj.messages[3].content) == ("c1", "a.txt")
    assert traj.messages[2].token_ids == [4, 5] and traj.messages[2].logprobs == [-0.5, -0.25]
    assert [t.name for t in traj.tools] == ["bash"]


def test_what_trajforge_writes_validates_with_harbors_models(tmp_path: Path) -> None:
    written = [to_atif(synthetic_trajectory(k)) for k in range(3)]
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in written))
    read = [json.loads(line) for line in run_harbor(READ, str(path)).splitlines()]
    assert len(read) == 3
    for ours, theirs in zip(written, read, strict=True):
        assert theirs["version"] == ATIF_VERSION == ours["schema_version"]
        assert theirs["sources"] == [s["source"] for s in ours["steps"]]
        calls: list[Any] = [
            [c["function_name"], c["arguments"]]
            for s in ours["steps"]
            for c in s.get("tool_calls", [])
        ]
        assert theirs["calls"] == calls and calls  # the synthetic episodes call tools
        results = [
            r["content"] for s in ours["steps"] for r in s.get("observation", {}).get("results", [])
        ]
        assert theirs["results"] == results
        assert theirs["completion_ids"] == [
            s["metrics"]["completion_token_ids"] for s in ours["steps"] if "metrics" in s
        ]


WRITE_SCREENSHOT = """
import json, sys
from harbor.models.trajectories import Agent, Step, Trajectory
from harbor.models.trajectories.content import ContentPart, ImageSource
trajectory = Trajectory(
    session_id="gui-1",
    agent=Agent(name="computer-1", version="1.0", model_name="m"),
    steps=[
        Step(step_id=1, source="user", message=[
            ContentPart(type="text", text="Click the button."),
            ContentPart(type="image", source=ImageSource(media_type="image/png",
                                                         path="images/screen.png")),
            ContentPart(type="image", source=ImageSource(media_type="image/png",
                                                         path="images/gone.png")),
        ]),
        Step(step_id=2, source="agent", message="Clicked."),
    ],
)
print(json.dumps(trajectory.to_json_dict()))
"""

READ_IMAGES = """
import base64, hashlib, json, sys
from harbor.models.trajectories import Trajectory
doc = Trajectory.model_validate_json(open(sys.argv[1]).read())
out = []
for step in doc.steps:
    for part in step.message if isinstance(step.message, list) else []:
        if part.type == "image":
            data = base64.b64decode(part.source.path.split(",", 1)[1])
            out.append([part.source.media_type, hashlib.sha256(data).hexdigest()])
print(json.dumps(out))
"""


def test_images_harbor_saves_beside_the_document_read_with_equal_bytes(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "screen.png").write_bytes(png_bytes(4))
    path = tmp_path / "trajectory.json"
    path.write_text(run_harbor(WRITE_SCREENSHOT))
    (traj,) = read_atif_file(path)
    (image,) = traj.messages[0].images
    assert image.data == png_bytes(4) and image.media_type == "image/png"
    assert traj.messages[0].text == "Click the button.\n[image: images/gone.png]"
    (note,) = traj.metadata["atif"]["dropped"]
    assert note.startswith("steps.0.message.2.source.path: cannot read images/gone.png")


def test_images_trajforge_writes_validate_with_harbors_models(tmp_path: Path) -> None:
    traj = image_trajectory(png_bytes(1), png_bytes(2))
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(to_atif(traj)))
    seen = json.loads(run_harbor(READ_IMAGES, str(path)))
    assert seen == [["image/png", p.sha256] for p in traj.messages[0].images]
