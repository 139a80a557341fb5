"""An environment whose tools come from an MCP server: the reference time server, over stdio."""

from trajforge.envs.mcp import MCPEnv, MCPServerSpec
from trajforge.schema import Task

TIME_SERVER = MCPServerSpec(name="time", command="python", args=["-m", "mcp_server_time"])
TASKS = [
    Task(id="tokyo", prompt="It is 09:00 in Tokyo. What time is it in Dubai?", answer="04:00"),
    Task(id="lima", prompt="It is 12:00 in Lima. What time is it in Kolkata?", answer="22:30"),
]


def make_env() -> MCPEnv:
    return MCPEnv([TIME_SERVER], tasks=TASKS, system_prompt="Use the tools; end with HH:MM.")
