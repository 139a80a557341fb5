"""Layer 6: training on trajectories — token batches, SFT, DPO and RL trainers, checkpoints.

Submodules are imported directly (``trajforge.train.sft.SFTTrainer``) so that reading a config
never pays for importing torch.
"""
