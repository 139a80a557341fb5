"""A minimal harness as ``trajforge collect`` runs it: standard library only, it runs every
``bash`` tool call its model asks for (as Claude Code, Codex and opencode do) and sends the
output back, until the model answers in text."""

import json
import os
import subprocess
import sys
import urllib.request


def call(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def run(command: str) -> str:
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not run: {exc}"
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def main() -> None:
    task = json.loads(sys.stdin.read())
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    messages = [{"role": "user", "content": task["prompt"]}]
    base = os.environ["OPENAI_BASE_URL"]
    while True:
        body = {"model": os.environ["TRAJFORGE_MODEL"], "messages": messages, "tools": [tool]}
        message = call(f"{base}/chat/completions", body)["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return
        for c in message["tool_calls"]:
            output = run(json.loads(c["function"]["arguments"])["command"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": output})


if __name__ == "__main__":
    main()
