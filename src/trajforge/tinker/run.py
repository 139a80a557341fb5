"""``trajforge serve --tinker``: the models offered and the server in the foreground."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.policy import EMBEDDED_NAME, model_folder
from trajforge.serve import serve_app_forever
from trajforge.store import TrajectoryStore
from trajforge.tinker.app import tinker_app
from trajforge.tinker.service import TinkerService


def offered_models(folders: list[Path]) -> dict[str, str]:
    """Served name -> what ``load_base_model`` loads: the embedded model (also under the path
    of its safetensors folder), ``tiny`` and each folder under its own name and under its
    absolute path. A path as the name is what lets code that loads a tokenizer by the model's
    name, as tinker-cookbook does, find it offline. A name given twice is refused."""
    models = {
        EMBEDDED_NAME: "embedded",
        "embedded": "embedded",
        str(model_folder().resolve()): "embedded",
        "tiny": "tiny",
    }
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError(f"--tinker-model: {folder} is not a model folder")
        if folder.name in models:
            raise ConfigError(f"--tinker-model: a model named {folder.name!r} is already served")
        path = str(folder.resolve())
        models[folder.name] = models[path] = path
    return models


def serve_tinker(
    host: str, port: int, root: Path, folders: list[Path], store_path: Path, report: Console
) -> None:
    """Serve until Ctrl-C; ``report`` prints a line (the CLI's console)."""
    models = offered_models(folders)
    with TrajectoryStore(store_path) as store:
        service = TinkerService(root, models, store)
        report.print(
            f"serving the Tinker API at http://{host}:{port} (models: {', '.join(models)}); "
            f"tinker.ServiceClient(base_url='http://{host}:{port}', api_key='tml-local'); "
            f"checkpoints and tokenizers under {service.root}; samples into {store_path}; "
            "Ctrl-C stops",
            soft_wrap=True,
        )
        try:
            serve_app_forever(tinker_app(service), host, port, graceful_s=5)
        finally:
            asyncio.run(service.close())
