"""An agent program as ``trajforge collect`` runs it: standard library only (it is started 200
times in a test), speaking the OpenAI wire format to ``$OPENAI_BASE_URL``. The task's ``data``
says how this run behaves: ``crash`` exits 1 after its first call, ``hang`` starts a child and
sleeps (both must be killed), ``sleep`` waits that many seconds before its first call, ``max_tokens`` bounds each reply,
``reward`` is how it reports one (``post`` or ``print``), ``compact`` is a summary that replaces
its history but the last turn after its second tool round (as Claude Code compacts), ``home``
makes the reward whether ``$HOME`` is that folder (a confined run's is the sandbox's)."""

import json
import os
import subprocess
import sys
import time
import urllib.request


def call(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def main() -> None:
    task = json.loads(sys.stdin.read())
    assert task == json.loads(os.environ["TRAJFORGE_TASK"])
    base, behaviour = os.environ["OPENAI_BASE_URL"], task["data"]
    if behaviour.get("hang"):
        marker = behaviour["hang"]
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker])
        time.sleep(600)
    time.sleep(behaviour.get("sleep", 0))
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    messages = [{"role": "user", "content": task["prompt"]}]
    while True:
        body = {"model": os.environ["TRAJFORGE_MODEL"], "messages": messages, "tools": [tool]}
        if "max_tokens" in behaviour:
            body["max_tokens"] = behaviour["max_tokens"]
        reply = call(f"{base}/chat/completions", body)
        message = reply["choices"][0]["message"]
        messages.append(message)
        if behaviour.get("crash"):
            print("the agent fell over", file=sys.stderr)
            sys.exit(1)
        if not message.get("tool_calls"):
            break
        for c in message["tool_calls"]:
            args = json.loads(c["function"]["arguments"])
            result = json.dumps({"sum": args["a"] + args["b"]})
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        if behaviour.get("compact") and sum(m["role"] == "tool" for m in messages) == 2:
            messages = [{"role": "user", "content": behaviour["compact"]}, *messages[-2:]]
    right = float(message["content"] == f"The total is {task['answer']}.")
    if "home" in behaviour:
        right = float(os.environ.get("HOME") == behaviour["home"])
    if behaviour.get("reward") == "post":
        call(os.environ["TRAJFORGE_SESSION_URL"] + "/reward", {"reward": right})
    elif behaviour.get("reward") == "print":
        print("some log line")
        print(json.dumps({"reward": right}))


if __name__ == "__main__":
    main()
