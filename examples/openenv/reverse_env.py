from openenv.core.env_server import Action, Environment, Observation, State

class Reply(Action):
    word: str

class Prompt(Observation):
    prompt: str = ""

class ReverseEnvironment(Environment):
    """Reverse a word: reward 1 when the reply is the word spelled backwards."""
    def reset(self, seed=None, episode_id=None) -> Prompt:
        self.word, self.steps = ("openenv", "trajforge", "agent")[(seed or 0) % 3], 0
        return Prompt(prompt=f"Spell the word {self.word!r} backwards.")
    def step(self, action: Reply) -> Prompt:
        self.steps += 1
        return Prompt(done=True, reward=float(action.word == self.word[::-1]))
    @property
    def state(self) -> State:
        return State(step_count=self.steps)
