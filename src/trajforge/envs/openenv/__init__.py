"""OpenEnv both ways: OpenEnv environments in trajforge, trajforge environments in OpenEnv.

``openenv:TARGET`` (``source``) is an OpenEnv server, at a URL or started here from its
Python code (``process``, ``launch``, ``apps``), whose reset/step/state drive a trajforge
episode (``env``: ``OpenEnvEnv``, the action as a tool or as text). The other way round,
``server`` serves any trajforge environment as an OpenEnv server (``trajforge openenv serve
ENV``) whose typed models (``models``) OpenEnv's own client speaks. ``env``, ``apps``,
``models`` and ``server`` import ``openenv-core`` (seconds: it loads gradio), so the registry
loads ``source`` by name, only when an ``openenv:`` env is named.
"""
