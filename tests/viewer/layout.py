"""What the viewer tests' store holds (``conftest.run_dir``): ``COUNT`` trajectories of ``RUN``
in groups of ``SAMPLES``, and two of ``OTHER_RUN`` (``tok-decoded``, ``cut-short``)."""

RUN = "exp.rl"
OTHER_RUN = "exp.eval"
SAMPLES = 4
COUNT = 40
