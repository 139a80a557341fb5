"""Built-in environments. Each module exposes ``make_env``, ``generate_tasks`` and ``expert``."""
