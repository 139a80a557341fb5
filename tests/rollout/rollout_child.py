"""A rollout run in its own process, for the kill-and-resume test: ``rollout_child.py STORE RUN``."""

from __future__ import annotations

import sys

from rollout_doubles import FakePolicy, TurnsEnv, make_tasks, run_live

from trajforge.store.sqlite import TrajectoryStore

TASKS = 40
N = 2


def main() -> None:
    store_path, run_id = sys.argv[1], sys.argv[2]
    with TrajectoryStore(store_path) as store:
        run_live(
            lambda: TurnsEnv(3, delay=lambda task, turn: 0.03),
            FakePolicy(),
            make_tasks(TASKS),
            n=N,
            store=store,
            run_id=run_id,
            seed=3,
            concurrency=4,
        )


if __name__ == "__main__":
    main()
