"""Self-play RL on a game: win rate against the heuristic opponent before and after.

The ``pocket`` policy (a 7M-parameter Llama built from scratch) first learns the game's text
protocol by SFT on games between two ``random`` scripted seats (legal moves, no skill); that
is "before". Then self-play RL (``self_play: {opponent: self}``, SPIRAL's role-conditioned
advantages): the policy plays every seat of each game against itself and every seat is
trained; it never meets the heuristic opponent while it learns. "After" is the RL's final
weights; every few steps the policy also plays training-split games it never trains on,
greedily against the heuristic (RL validation, choosing nothing): the win rate per step. Both
checkpoints are played greedily in each held-out task's seat (the test split, never trained
on) against the ``heuristic`` and the ``random`` opponents; win/draw/loss with Wilson 95%
intervals, and an Elo table over the two checkpoints and both opponents.

    .venv/bin/python bench/self_play.py --micro            # the tiny model, ~1 min: proves the path
    .venv/bin/python bench/self_play.py --out runs/self-play   # kuhn-poker and pocket, minutes
    .venv/bin/python bench/self_play.py --sft runs/self-play/sft/final --steps 100 --out runs/sp100
    .venv/bin/python bench/self_play.py --env tictactoe --eval 130 --out runs/sp-ttt  # every test opening
    .venv/bin/python bench/self_play.py --env nim --out runs/sp-nim   # one-pile Nim, room to learn
    .venv/bin/python bench/self_play.py --per-role --sft runs/self-play/sft/final --out runs/sp-roles

Arms: by default one policy, every weight trained, plays both seats. ``--lora R`` trains one
LoRA adapter of rank R instead (still shared by the seats); ``--per-role`` gives each seat its
own LoRA adapter on the one base model (``self_play.per_role``, rank ``--lora``, default 16),
each trained on its own seat's trajectories, rollouts decoding both seats' turns in one batch,
each row under its seat's adapter; "after" then plays each held-out task's seat with that
seat's adapter.

Writes ``results.json`` (with ``games``) and ``report.html`` in ``--out``, prints the tallies
and then ONE JSON line: ``win_ceiling``, on kuhn-poker and nim the most any greedy player wins
on these tasks against the heuristic (``kuhn.best_response``, ``nim.best_response``); ``ratio``
= the win rate against the heuristic after / before (null when before is 0, with both rates).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from trajforge.envs.multiseat import kuhn, nim
from trajforge.envs.registry import get_env
from trajforge.policy.adapter_seat import AdapterSeat
from trajforge.policy.naming import load_policy
from trajforge.report.games import GamesSummary, GameTally, elo_ratings, tally
from trajforge.report.html import build_report
from trajforge.rollout import RolloutSpec, Sampling, TaskSample, run_rollout
from trajforge.rollout.multiseat import MultiSeatRunner, play_against, scripted_seat
from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.config import RLConfig, SFTConfig
from trajforge.train.rl import RLTrainer
from trajforge.train.sft import SFTTrainer

OPPONENTS = ("heuristic", "random")
CREDIT = ("rae", "gigpo", "grpo")
SIZES: dict[str, dict[str, int]] = {
    # From scratch the pocket model needs several passes over a few hundred games to learn
    # the protocol; RL then runs 8 tasks x 8 samples x 2 seats a step.
    # ``val`` games of the training split the RL never samples, greedy against the heuristic
    # every ``every`` steps: the win rate per step (``validation``; the final weights are kept).
    "full": {
        "games": 400,
        "sft_epochs": 6,
        "steps": 30,
        "groups": 8,
        "samples": 8,
        "eval": 200,
        "val": 64,
        "every": 5,
    },
    "micro": {
        "games": 16,
        "sft_epochs": 1,
        "steps": 2,
        "groups": 2,
        "samples": 2,
        "eval": 16,
        "val": 4,
        "every": 1,
    },
}


def _demonstrations(env: str, games: int, store: Path, demos: str) -> list[Any]:
    """Both seats' trajectories of games between two ``demos`` scripted seats."""
    entry = get_env(env)
    assert entry.game is not None
    seats = entry.game().seats
    policies = {seat: scripted_seat(entry, demos) for seat in seats}
    spec = RolloutSpec(env=env, tasks=TaskSample(count=games), run_id="demos", store=store)
    run_rollout(spec, runner=MultiSeatRunner(entry.game, policies))
    with TrajectoryStore(store) as st:
        return [t for t in st.query() if t.num_turns > 0]


def _evaluate(
    env: str, model: str, name: str, tasks: list[Any], per_role: bool = False
) -> list[GameTally]:
    """``model`` greedy in each task's seat against each scripted opponent; with ``per_role``
    ``model`` is a per-role run's final folder: its base weights, each seat under its adapter
    (``adapter/<seat>``)."""
    entry = get_env(env)
    policy: Any = load_policy(model)
    if per_role:
        assert entry.game is not None
        seats = entry.game().seats
        for seat in seats:
            policy.add_adapter(seat, Path(model) / "adapter" / seat)
        policy = AdapterSeat(policy, {seat: seat for seat in seats})
    greedy = Sampling(temperature=0.0, max_new_tokens=4)
    return [
        tally(play_against(entry, policy, opponent, tasks, sampling=greedy), name, opponent)
        for opponent in OPPONENTS
    ]


def _sft(
    args: argparse.Namespace, model: str, sizes: dict[str, int], out: Path, common: dict[str, Any]
) -> Path:
    """``model`` taught the game's protocol on games between two ``--demos`` seats (the SFT
    loss on ``--sft-on``); its final folder."""
    demos = _demonstrations(args.env, sizes["games"], out / "demos.db", args.demos)
    sft_cfg = SFTConfig.model_validate(
        {
            **common,
            "output_dir": out / "sft",
            "model": {"spec": model, "precision": "fp32"},
            "data": {"store": out / "demos.db"},
            "epochs": sizes["sft_epochs"],
            "batch_size": 16,
            "loss_on": args.sft_on,
            "optim": {"lr": 3e-3, "schedule": "cosine", "warmup_steps": 5},
        }
    )
    sft = SFTTrainer(sft_cfg, demos).train(overwrite=True)
    assert sft.final_dir is not None
    return sft.final_dir


def _show(t: GameTally) -> str:
    return (
        f"{t.player:>7} vs {t.opponent:<9} win {100 * t.win_rate:5.1f}% "
        f"[{100 * t.win_low:.1f}, {100 * t.win_high:.1f}]  "
        f"W/D/L {t.wins}/{t.draws}/{t.losses} of {t.games}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="kuhn-poker", help="a game: kuhn-poker, nim, tictactoe, negotiation")  # fmt: skip
    parser.add_argument("--micro", action="store_true", help="the tiny model at micro sizes")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="RL steps (default: the size's)")
    parser.add_argument("--sft", type=Path, default=None, help="start from this SFT model folder (an earlier run's sft/final) instead of training one")  # fmt: skip
    parser.add_argument("--eval", type=int, default=None, help="held-out games (default: the size's; tictactoe has 130 distinct test openings)")  # fmt: skip
    parser.add_argument("--credit", choices=CREDIT, default="rae", help="the advantages: rae (SPIRAL's role baselines, one advantage a game), gigpo or grpo (over each task's samples of one seat; gigpo adds a step-level advantage per anchor state, the pile and mover)")  # fmt: skip
    parser.add_argument("--sft-on", choices=["assistant", "all"], default="assistant", help="the SFT loss: the moves alone (assistant) or the whole transcript, the game's views too (all)")  # fmt: skip
    parser.add_argument("--lr", type=float, default=3e-4, help="the RL learning rate")
    parser.add_argument("--lora", type=int, default=None, help="train a LoRA adapter of this rank instead of every weight (one shared by the seats unless --per-role)")  # fmt: skip
    parser.add_argument("--per-role", action="store_true", help="each seat its own LoRA adapter on the one base model (rank --lora, default 16), trained on its own seat's games")  # fmt: skip
    parser.add_argument("--demos", choices=OPPONENTS, default="random", help="the scripted seats whose games SFT learns from (default random: the protocol, no skill; heuristic: on nim, replies that depend on the pile)")  # fmt: skip
    args = parser.parse_args()
    if args.per_role and args.lora is None:
        args.lora = 16
    arm = "per-role" if args.per_role else "shared-lora" if args.lora else "shared"
    model_settings: dict[str, Any] = {"precision": "fp32"}
    if args.lora:
        model_settings["lora"] = {"r": args.lora, "alpha": 2 * args.lora}
    sizes = dict(SIZES["micro" if args.micro else "full"])
    for key in ("steps", "eval"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    # Drawn first: a game with fewer distinct held-out tasks than asked fails before training.
    held_out = get_env(args.env).tasks(sizes["eval"], seed=args.seed, split="test")
    model = "tiny" if args.micro else "pocket"
    out = args.out or Path(tempfile.mkdtemp(prefix="self-play-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    common: dict[str, Any] = {"tensorboard": False, "progress": False, "seed": args.seed}
    sft_dir = args.sft or _sft(args, model, sizes, out, common)
    t_sft = time.perf_counter()

    rl_cfg = RLConfig.model_validate(
        {
            **common,
            "output_dir": out / "rl",
            "env": args.env,
            "model": {**model_settings, "spec": str(sft_dir)},
            "num_tasks": 256,
            "steps": sizes["steps"],
            "groups_per_step": sizes["groups"],
            "samples_per_group": sizes["samples"],
            "epochs_per_step": 2,
            "temperature": 1.0,
            "max_new_tokens": 4,
            "loss": "ppo_clip",
            "optim": {"lr": args.lr},
            "store": out / "store.db",
            "self_play": {
                "opponent": "self",
                "advantage": "rae" if args.credit == "rae" else "estimator",
                "per_role": args.per_role,
            },
            "estimator": "grpo" if args.credit == "rae" else args.credit,
            "validation": {"tasks": sizes["val"], "every": sizes["every"], "keep_best": False},
        }
    )
    rl = RLTrainer(rl_cfg).train(overwrite=True)
    assert rl.final_dir is not None
    t_rl = time.perf_counter()

    # The most any greedy player wins on these tasks against the heuristic (the games with a
    # ``best_response``: kuhn-poker and nim).
    ceiling = None
    if args.env == kuhn.NAME:
        ceiling = kuhn.best_response(held_out, kuhn.heuristic_action)[0]
    elif args.env == nim.NAME:
        ceiling = nim.best_response(held_out, nim.heuristic_action)[0]
    tallies = [
        *_evaluate(args.env, str(sft_dir), "before", held_out),
        *_evaluate(args.env, str(rl.final_dir), "after", held_out, args.per_role),
    ]
    summary = GamesSummary(env=args.env, tallies=tallies, elo=elo_ratings(tallies))
    results = {
        "name": f"self-play-{args.env}",
        "env": args.env,
        "model": model,
        "stages": [],
        "store": "store.db",
        "games": summary.model_dump(mode="json"),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    report = build_report(out)
    for t in tallies:
        print(_show(t))
    for row in summary.elo:
        print(f"elo {row.player:>9} {row.rating:7.1f} ({row.games} games)")
    per_step = [(p["step"], p["success"]) for p in rl.validation]
    print("validation win rate vs heuristic (step, rate):", per_step)
    if ceiling is not None:
        print(f"the best greedy player wins {100 * ceiling:.1f}% of these games vs the heuristic")
    versus = {(t.player, t.opponent): t for t in tallies}
    before, after = versus[("before", "heuristic")], versus[("after", "heuristic")]
    line = {
        "bench": "self_play",
        "env": args.env,
        "model": model,
        "held_out_games": len(held_out),
        "win_before": before.win_rate,
        "win_before_ci95": [before.win_low, before.win_high],
        "win_after": after.win_rate,
        "win_after_ci95": [after.win_low, after.win_high],
        "win_gain_points": 100 * (after.win_rate - before.win_rate),
        "validation_win_curve": per_step,
        "win_ceiling": ceiling,
        "rl_steps": sizes["steps"],
        "sft_from": str(args.sft) if args.sft else None,
        "demos": None if args.sft else args.demos,
        "sft_on": None if args.sft else args.sft_on,
        "credit": args.credit,
        "arm": arm,
        "lora_r": args.lora,
        "lr": args.lr,
        "sft_s": round(t_sft - t0, 1),
        "rl_s": round(t_rl - t_sft, 1),
        "total_s": round(time.perf_counter() - t0, 1),
        "report": str(report),
        "ratio": after.win_rate / before.win_rate if before.win_rate > 0 else None,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
