"""What the feature-based set metrics (FID/KID on Inception, precision/recall on VGG-16) share about
their networks: the local weights file they need (never downloaded here), and a custom feature
module named as `<module>:<factory>` in place of the built-in network. One wording for each refusal,
whichever metric asks."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from sjdbench.errors import UserError


def local_weights(
    setting: str | None, key: str, file: str, url: str, needed_by: str, network: str, publisher: str
) -> Path:
    """The weights file `setting` names (the `key` setting), or `file` in torch's hub checkpoints
    folder; one-line UserError saying where to put it when it is not on this machine."""
    import torch

    if setting:
        path = Path(setting).expanduser()
        if not path.is_file():
            raise UserError(f"{key}={setting} is not a file; pass {publisher} {file}")
        return path
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    path = folder / file
    if not path.is_file():
        raise UserError(
            f"{needed_by} need the {network} weights {file} (no download is attempted): place it "
            f"in {folder} (from {url}) or pass {key}=<file>"
        )
    return path


def custom_feature_module(feature: str, key: str, built_in: str, device: str) -> tuple[Any, int, str]:
    """(module, its output width, description) of `feature` = `<module>:<factory>` (the `key` setting;
    `built_in` names the default it replaces): the factory's module, which must say its width in
    `num_features`."""
    module_name, _, attr = feature.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as error:
        raise UserError(f"{key}={feature}: cannot import it ({error}); use {built_in} or <module>:<factory>") from None
    module = factory()
    dim = int(getattr(module, "num_features", 0))
    if not dim:
        raise UserError(f"{key}={feature}: the module needs a num_features attribute (its output width)")
    return module.to(device).eval(), dim, f"custom feature module {feature}"
