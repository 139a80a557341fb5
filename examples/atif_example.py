"""An ATIF file (Harbor's agent/trajectory.json) in, its conversation shown, ATIF v1.8 out."""

import json
import sys
from pathlib import Path

from trajforge.formats.atif import read_atif_file, to_atif


def main(source: str, out: str) -> None:
    for traj in read_atif_file(Path(source)):  # every document, or an error at file:line
        for message in traj.messages:
            calls = [f"{call.name}({json.dumps(call.arguments)})" for call in message.tool_calls]
            print(message.role.value, message.content[:40], *calls)
        Path(out).write_text(json.dumps(to_atif(traj), indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:])
