"""Layer 6: training on trajectories — token batches, SFT, DPO and RL trainers, checkpoints.

Other packages import the names below from here (``from trajforge.train import SFTTrainer``);
each loads its module on first access, so reading a config never pays for importing torch.
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.train.base import Trainer, TrainResult
    from trajforge.train.checkpoint import checkpoint_root, latest_checkpoint
    from trajforge.train.config import ConfigT, env_problem, load_train_config, model_name_problem
    from trajforge.train.data import load_source
    from trajforge.train.distributed import (
        from_main,
        is_main_process,
        join_launched_processes,
        leave_process_group,
    )
    from trajforge.train.dpo import DPOTrainer
    from trajforge.train.interrupted import TrainingInterrupted
    from trajforge.train.launch import launch_local, launched_rank
    from trajforge.train.logprobs import token_logprobs
    from trajforge.train.model import apply_lora, load_base_model, lora_config, make_optimizer
    from trajforge.train.rl.advantages import advantage_input
    from trajforge.train.rl.config import RLConfig
    from trajforge.train.rl.distill_config import DistillConfig
    from trajforge.train.rl.trainer import RLTrainer
    from trajforge.train.settings import (
        CommonSettings,
        DistributedSettings,
        DPOConfig,
        LoraSettings,
        ModelSettings,
        OptimSettings,
        SFTConfig,
    )
    from trajforge.train.sft import SFTTrainer

__all__ = [
    "CommonSettings",
    "ConfigT",
    "DPOConfig",
    "DPOTrainer",
    "DistillConfig",
    "DistributedSettings",
    "LoraSettings",
    "ModelSettings",
    "OptimSettings",
    "RLConfig",
    "RLTrainer",
    "SFTConfig",
    "SFTTrainer",
    "TrainResult",
    "Trainer",
    "TrainingInterrupted",
    "advantage_input",
    "apply_lora",
    "checkpoint_root",
    "env_problem",
    "from_main",
    "is_main_process",
    "join_launched_processes",
    "latest_checkpoint",
    "launch_local",
    "launched_rank",
    "leave_process_group",
    "load_base_model",
    "load_source",
    "load_train_config",
    "lora_config",
    "make_optimizer",
    "model_name_problem",
    "token_logprobs",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "CommonSettings": "settings",
        "ConfigT": "config",
        "DPOConfig": "settings",
        "DPOTrainer": "dpo",
        "DistillConfig": "rl.distill_config",
        "DistributedSettings": "settings",
        "LoraSettings": "settings",
        "ModelSettings": "settings",
        "OptimSettings": "settings",
        "RLConfig": "rl.config",
        "RLTrainer": "rl.trainer",
        "SFTConfig": "settings",
        "SFTTrainer": "sft",
        "TrainResult": "base",
        "Trainer": "base",
        "TrainingInterrupted": "interrupted",
        "advantage_input": "rl.advantages",
        "apply_lora": "model",
        "lora_config": "model",
        "checkpoint_root": "checkpoint",
        "env_problem": "config",
        "from_main": "distributed",
        "is_main_process": "distributed",
        "join_launched_processes": "distributed",
        "latest_checkpoint": "checkpoint",
        "launch_local": "launch",
        "launched_rank": "launch",
        "leave_process_group": "distributed",
        "load_base_model": "model",
        "load_source": "data",
        "load_train_config": "config",
        "make_optimizer": "model",
        "model_name_problem": "config",
        "token_logprobs": "logprobs",
    },
)
