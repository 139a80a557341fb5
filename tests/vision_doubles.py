"""A small screen environment whose observations carry a screenshot image part, for the
vision-language policy tests: the agent is shown a coloured square and names its colour."""

from __future__ import annotations

import copy
import io
from pathlib import Path

from PIL import Image, ImageDraw
from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from trajforge.envs.base import Env, StepResult
from trajforge.policy import Policy
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.models.tiny import from_seed
from trajforge.policy.models.tiny_vlm import TINY_VLM_CHAT_TEMPLATE
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import ImagePart, Message, Role, Task, TextPart, Trajectory

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 200, 30),
    "blue": (30, 30, 220),
}
ENV_REF = f"{Path(__file__)}:factory"
"""What ``env:`` takes for this environment."""


def screenshot(colour: str, shift: int = 0) -> ImagePart:
    """A 48 x 32 white screen with a square of ``colour``, ``shift`` pixels to the right."""
    picture = Image.new("RGB", (48, 32), (255, 255, 255))
    ImageDraw.Draw(picture).rectangle((8 + shift, 8, 24 + shift, 24), fill=COLOURS[colour])
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return ImagePart.from_bytes(buffer.getvalue())


class ScreenEnv(Env):
    """Two looks at the screen at most: a wrong answer gets a second screenshot."""

    name = "screen"

    async def reset(self, task: Task) -> list[Message]:
        self.colour = str(task.data["colour"])
        self.turn = 0
        question = TextPart(text="Which colour is the square? Answer with its name.")
        return [Message(role=Role.USER, content=[question, screenshot(self.colour)])]

    async def step(self, action: Message) -> StepResult:
        self.turn += 1
        right = self.colour in action.text.lower()
        if right or self.turn >= 2:
            return StepResult(observations=[], reward=float(right), done=True)
        again = [screenshot(self.colour, shift=12), TextPart(text="Look again.")]
        return StepResult(observations=[Message(role=Role.USER, content=again)])


class Screen:
    name = "screen"

    def make(self) -> ScreenEnv:
        return ScreenEnv()

    def tasks(self, n: int, seed: int = 0, split: str = "train") -> list[Task]:
        names = list(COLOURS)
        return [
            Task(
                id=f"screen-{i}",
                prompt="Which colour is the square?",
                data={"colour": names[(i + seed) % len(names)]},
            )
            for i in range(n)
        ]


def factory() -> Screen:
    return Screen()


def screen_episodes(policy: Policy, *, n: int = 2, seed: int = 3) -> list[Trajectory]:
    """``n`` episodes of each of two screen tasks (red, green), up to two turns each."""
    spec = RolloutSpec(
        env=ENV_REF,
        tasks=Screen().tasks(2, seed=0),
        n=n,
        limits=Limits(max_turns=2),
        # A random model rarely samples its end of turn: a stop string ends each reply, so
        # episodes go on to a second screenshot instead of being cut.
        sampling={"max_new_tokens": 16, "temperature": 1.0, "stop": ["e", "a", "o"]},
        seed=seed,
    )
    return run_rollout(spec, policy=policy)


def save_tiny_idefics3(folder: Path) -> Path:
    """A second architecture, saved as a model folder: Idefics3 (SmolVLM's), 2 layers of width
    64 at random weights, images of 32 pixels a side without splitting, 4 ``<image>`` tokens
    between ``<fake_token_around_image><global-img>`` and ``<fake_token_around_image>``."""
    tokenizer = copy.deepcopy(load_tokenizer())
    specials = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.chat_template = TINY_VLM_CHAT_TEMPLATE
    images = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": 32},
        max_image_size={"longest_edge": 32},
    )
    processor = Idefics3Processor(
        image_processor=images,
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=TINY_VLM_CHAT_TEMPLATE,
    )
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "eos_token_id": tokenizer.eos_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    model = from_seed(Idefics3ForConditionalGeneration, config, tokenizer, seed=0)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
