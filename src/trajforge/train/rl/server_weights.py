"""Rollouts sampled by a vLLM server whose weights follow the trainer (``rollout_server``).

Where users outgrow one process they generate with vLLM and train elsewhere. Here the server
holds the trained model's base weights and the trainer's adapter: after every update the
adapter is saved and loaded through vLLM's ``/v1/load_lora_adapter`` under the update count,
which every turn sampled with it records (``weights_version``), as the in-process policy's
turns do. The calls under way when it loads finish on the adapter they began with (a partial
rollout samples its later turns from the new one), so the asynchronous mode, the staleness
bound and the off-policy corrections work unchanged. Full fine-tuning reloads instead: the
weights are saved and the server started again on them (vLLM moves new weights into a running
server over NCCL or CUDA IPC only), so its rollouts cannot run ahead of training. Tokens go to
and come from the server as ids (``VLLMPolicy``), so trajectories stay token-exact.

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
    """The rollout policy is a vLLM server's (``None`` off the main process), following the
    trainer after every update: a LoRA model's adapter is loaded, full weights are reloaded.

    Args:
        parts: The trained model's parts (a text model in one process).
        cfg: The run's config (``rollout_server``, ``rollout_precision``, batch size).
    """

    def __init__(self, parts: TrainParts, cfg: RLConfig) -> None:
        if parts.processor is not None or parts.sharded:
            raise ConfigError(
                "rollout_server: samples text models trained in one process (not a vision "
                "model, not under FSDP)"
            )
        self.folder: Path | None = None
        super().__init__(parts, cfg)

    @property
    def server(self) -> VLLMPolicy | None:
        return cast(VLLMPolicy | None, self.policy)

    def _make_policy(self) -> VLLMPolicy | None:
        if not self.parts.accelerator.is_main_process:
            return None
        self.folder = Path(tempfile.mkdtemp(prefix="trajforge-rollout-server-"))
        spec = self.cfg.rollout_server
        assert spec is not None
        options: dict[str, Any] = {"max_batch_size": self.cfg.max_batch_size, "name": spec}
        try:
            if spec == MANAGED_SERVER:
                target = f"{VLLM_PREFIX}{self._save_weights('weights-base')}"
                lora = self.cfg.model.lora
                options |= {"dtype": self.dtype, "max_lora_rank": lora.r if lora else None}
            else:
                target, options["tokenizer"] = spec, self.parts.tokenizer
            policy = load_policy(target, **options)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        return cast(VLLMPolicy, policy)

    def _save_weights(self, name: str) -> Path:
        """The trained model's weights (a LoRA model's base, its adapter left out) and
        tokenizer, as a model folder vLLM loads, ``name`` in this run's folder."""
        assert self.folder is not None
        folder = self.folder / name
        trained: Any = self.parts.unwrapped_model()
        model = copy.deepcopy(trained).unload() if self.parts.is_lora else trained
        model.save_pretrained(folder, safe_serialization=True)
        save_tokenizer(self.parts.tokenizer, folder)
        return folder

    def refresh(self, version: int) -> None:
        """The trained weights to the server as ``version``: the adapter loaded (the one it
        replaces stays loaded for the calls still sampling with it), or the full weights
        reloaded. Older folders go."""
        server = self.server
        if server is None or self.folder is None:
            return
        if self.parts.is_lora:
            folder = self.folder / f"adapter-{version}"
            shutil.rmtree(folder, ignore_errors=True)  # a resumed run's step sampled again
            model: Any = self.parts.unwrapped_model()
            model.save_pretrained(folder)
            server.load_adapter(folder, version=version)
        else:
            folder = self._save_weights(f"weights-{version}")
            server.reload(folder, version)
        for old in self.folder.glob(f"{folder.name.split('-')[0]}-*"):
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def mark(self, version: int) -> None:
        """A run starting, or resumed: the server samples from the trained weights at once
        (the full weights it started on are those unless the run was resumed)."""
        if self.parts.is_lora or version > 0:
            self.refresh(version)

    def close(self) -> None:
        super().close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def rollout_weights(parts: TrainParts, cfg: RLConfig) -> RolloutWeights:
    """The rollout weights ``cfg`` asks for: a vLLM server's (``rollout_server``), else this
    process's."""
    return ServerWeights(parts, cfg) if cfg.rollout_server else RolloutWeights(parts, cfg)
