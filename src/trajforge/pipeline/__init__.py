from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.pipeline.config import STORE_FILE
    from trajforge.pipeline.experiment import Experiment, load_experiment
    from trajforge.pipeline.runner import ExperimentRunner
    from trajforge.pipeline.stages import STAGE_KINDS
    from trajforge.pipeline.train_results import StandaloneRun

__all__ = [
    "STAGE_KINDS",
    "STORE_FILE",
    "Experiment",
    "ExperimentRunner",
    "StandaloneRun",
    "load_experiment",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "Experiment": "experiment",
        "ExperimentRunner": "runner",
        "STAGE_KINDS": "stages",
        "STORE_FILE": "config",
        "StandaloneRun": "train_results",
        "load_experiment": "experiment",
    },
)
