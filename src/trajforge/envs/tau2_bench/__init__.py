"""tau2-bench domains as trajforge environments (the optional ``tau2`` extra).

``trajforge.envs.tau2_bench.adapter`` turns a tau2 domain (its tasks, database, policy and
tools) into a ``UserSimEnv`` scored by tau2's own evaluator; the registry names it
``tau2-<domain>`` (``tau2-mock``, ``tau2-retail``, ``tau2-airline``, ``tau2-telecom``).

Importing this package keeps tau2 offline and quiet before tau2 is imported: LiteLLM (which
tau2 imports) would otherwise fetch its model price list from the network at import, and tau2
logs its registry at DEBUG level on import. Both settings are ``setdefault``: a user who set
them otherwise keeps theirs.
"""

from __future__ import annotations

import os

from loguru import logger

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
logger.disable("tau2")
