"""A Harbor task run twice in the sandbox: the right file scores 1, a wrong one 0."""

import asyncio

from trajforge.envs.registry import get_env
from trajforge.schema import Message, Role, ToolCall


async def main(folder: str = "examples/harbor_tasks/hello-world") -> list[float]:
    entry, rewards = get_env(f"harbor:{folder}"), []
    for command in ["echo 'Hello, world!' > hello.txt", "echo 'Goodbye' > hello.txt"]:
        env, call = entry.make(), ToolCall(id="1", name="bash", arguments={"command": command})
        await env.reset(entry.tasks(1)[0])  # the instruction is the prompt
        await env.step(Message(role=Role.ASSISTANT, tool_calls=[call]))
        rewards.append((await env.step(Message(role=Role.ASSISTANT, content="Done."))).reward)
        await env.close()  # its workspace is removed
    return rewards


if __name__ == "__main__":
    print(asyncio.run(main()))  # [1.0, 0.0]: tests/test.sh's reward
