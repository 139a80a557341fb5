"""Rollouts sampled by a vLLM server whose LoRA adapter follows the trainer
(``rollout_server``).

Where users outgrow one process they generate with vLLM and train elsewhere. Here the server
holds the trained model's base weights and the trainer's adapter: after every update the
adapter is saved and loaded through vLLM's ``/v1/load_lora_adapter`` under the update count,
which every turn sampled with it records (``weights_version``), as the in-process policy's
turns do. The calls under way when it loads finish on the adapter they began with (a partial
rollout samples its later turns from the new one), so the asynchronous mode, the staleness
bound and the off-policy corrections work unchanged. Tokens go to and come from the server as
ids (``VLLMPolicy``), so trajectories stay token-exact.

``rollout_server: vllm`` starts a server on the base weights, saved from the trained model
itself (so a scratch model's seed, a checkpoint folder or the embedded model are served alike)
in the rollout precision; ``rollout_server: vllm:http://host:port`` uses a running one, which
must serve the same base weights, with runtime LoRA updates on, and read this machine's files.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

from trajforge.errors import ConfigError
from trajforge.policy import VLLM_PREFIX, VLLMPolicy, load_policy, save_tokenizer
from trajforge.train.config import RLConfig
from trajforge.train.model import TrainParts
from trajforge.train.rl.runners import RolloutWeights
from trajforge.train.rl.settings import MANAGED_SERVER


class ServerWeights(RolloutWeights):
    """The rollout policy is a vLLM server's (``None`` off the main process); its adapter is
    the trainer's, loaded after every update.

    Args:
        parts: The trained model's parts (a LoRA model: the server follows it by adapters).
        cfg: The run's config (``rollout_server``, ``rollout_precision``, batch size).
    """

    def __init__(self, parts: TrainParts, cfg: RLConfig) -> None:
        if not parts.is_lora:
            raise ConfigError(
                "rollout_server: a vLLM server follows the trainer through LoRA adapters; "
                "set model.lora (full weights would be a server restart a step)"
            )
        if parts.processor is not None or parts.sharded:
            raise ConfigError(
                "rollout_server: samples text models trained in one process (not a vision "
                "model, not under FSDP)"
            )
        self.folder: Path | None = None
        super().__init__(parts, cfg)

    @property
    def own_weights(self) -> bool:
        return True

    def _make_policy(self) -> VLLMPolicy | None:
        if not self.parts.accelerator.is_main_process:
            return None
        self.folder = Path(tempfile.mkdtemp(prefix="trajforge-rollout-server-"))
        spec = self.cfg.rollout_server
        assert spec is not None
        options: dict[str, Any] = {"max_batch_size": self.cfg.max_batch_size, "name": spec}
        try:
            if spec == MANAGED_SERVER:
                target = f"{VLLM_PREFIX}{self._save_base(self.folder / 'base')}"
                options |= {"dtype": self.dtype, "max_lora_rank": self._lora_rank()}
            else:
                target, options["tokenizer"] = spec, self.parts.tokenizer
            policy = load_policy(target, **options)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        return cast(VLLMPolicy, policy)

    def _save_base(self, folder: Path) -> Path:
        """The trained model's base weights (its adapter left out) and tokenizer, as a model
        folder vLLM loads."""
        trained: Any = self.parts.unwrapped_model()
        model = copy.deepcopy(trained).unload()
        model.save_pretrained(folder, safe_serialization=True)
        save_tokenizer(self.parts.tokenizer, folder)
        return folder

    def _lora_rank(self) -> int:
        lora = self.cfg.model.lora
        assert lora is not None
        return lora.r

    def refresh(self, version: int) -> None:
        """The trained adapter to the server as ``version``; the one it replaces stays loaded
        for the calls still sampling with it, older ones' folders go."""
        if self.policy is None or self.folder is None:
            return
        folder = self.folder / f"adapter-{version}"
        shutil.rmtree(folder, ignore_errors=True)  # a resumed run's step sampled again
        model: Any = self.parts.unwrapped_model()
        model.save_pretrained(folder)
        cast(VLLMPolicy, self.policy).load_adapter(folder, version=version)
        for old in self.folder.glob("adapter-*"):
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def mark(self, version: int) -> None:
        """A run starting (or resumed): the server samples with the trained adapter at once."""
        self.refresh(version)

    def close(self) -> None:
        super().close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def rollout_weights(parts: TrainParts, cfg: RLConfig) -> RolloutWeights:
    """The rollout weights ``cfg`` asks for: a vLLM server's (``rollout_server``), else this
    process's."""
    return ServerWeights(parts, cfg) if cfg.rollout_server else RolloutWeights(parts, cfg)
