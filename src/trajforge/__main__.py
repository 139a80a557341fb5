"""``python -m trajforge``: the ``trajforge`` command (what launchers such as ``accelerate launch
-m trajforge`` and ``--num-processes`` run in each process)."""

from trajforge.cli.main import main

main()
