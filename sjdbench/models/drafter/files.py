"""Drafter weight files: the released ones (jadohu/LANTERN's layout) and the ones trained here.

Released layout (a folder, or a hub snapshot): `config.json` equal to the target's config except
`num_hidden_layers` (1), plus an optional `"bias"` for the fc layer (absent: True), and
`pytorch_model.bin` (a torch state dict: `embed_tokens.weight`, `fc.weight`, `fc.bias`,
`layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.mlp.{gate,up,down}_proj.weight`,
`layers.0.post_attention_layernorm.weight`; Anole's also `layers.0.input_layernorm.weight` and
`layers.0.self_attn.{q,k}_norm.{weight,bias}`). The released loader falls back to `model.safetensors`.

Trained here: `<name>.safetensors` (the same key names) and `<name>.json` ({"config": DrafterConfig,
"target": ..., "train": ..., "data": ..., "curve": ...}), with `checksums.json` beside them as the
toy's weights have.

Every file is checked before it loads (missing, truncated, corrupt, shapes that do not fit the
config) with one line naming the file and how to get it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from sjdbench.models import hf_common
from sjdbench.models.drafter.network import DrafterConfig, DrafterNet
from sjdbench.models.weights import WeightsError, check_weight_file, recorded_checksums

CONFIG_FILE = "config.json"
RELEASED_WEIGHTS = ("pytorch_model.bin", "model.safetensors")  # the released loader's order
# jadohu/LANTERN's drafters and the target each was trained for (hub ids as its README gives them)
RELEASED = {
    "jadohu/llamagen_drafter": "LlamaGen T2I stage 1 (256 px; LANTERN's HF copy jadohu/LlamaGen-T2I)",
    "jadohu/llamagen2_drafter": "LlamaGen T2I stage 2 (512 px; LANTERN's HF copy jadohu/LlamaGen-T2I-2)",
    "jadohu/anole_drafter": "Anole-7b (leloy/Anole-7b-v0.1-hf)",
}
# LlamaGen drafters: the image side and conditioning slots of each `input_type` (cnets_llamagen.py)
LLAMAGEN_INPUTS = {"t2i": (16, 119), "t2i2": (32, 119), "c2i": (24, 0)}
LLAMAGEN_ROPE_BASE = 10000.0


def released_config(config: dict[str, Any]) -> DrafterConfig:
    """A released `config.json` as a DrafterConfig (ValueError naming what does not fit)."""
    kind = config.get("model_type")
    common: dict[str, Any] = dict(
        hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        num_attention_heads=int(config["num_attention_heads"]),
        num_key_value_heads=int(config.get("num_key_value_heads") or config["num_attention_heads"]),
        vocab_size=int(config["vocab_size"]),
        num_hidden_layers=int(config.get("num_hidden_layers", 1)),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        fc_bias=bool(config.get("bias", True)),
    )
    if config.get("rope_scaling"):
        raise ValueError(f"drafter config with rope_scaling {config['rope_scaling']} is not supported")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"drafter config with hidden_act {config['hidden_act']!r}; only silu is supported")
    if kind == "chameleon":
        theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta") or 10000.0
        return DrafterConfig(
            "chameleon",
            **common,
            rope_theta=float(theta),
            attention_bias=bool(config.get("attention_bias", False)),
            mlp_bias=bool(config.get("mlp_bias", False)),
        )
    if kind == "llama":
        input_type = config.get("input_type")
        if input_type not in LLAMAGEN_INPUTS:
            raise ValueError(
                f"a llama drafter config needs input_type {' | '.join(LLAMAGEN_INPUTS)} (LlamaGen), not {input_type!r}"
            )
        grid, cls = LLAMAGEN_INPUTS[input_type]
        return DrafterConfig(
            "llama",
            **common,
            rotary="llamagen_2d",
            rope_theta=LLAMAGEN_ROPE_BASE,
            grid=grid,
            cls_token_num=cls,
            sees_prompt_padding=True,
        )
    raise ValueError(f"drafter config of model_type {kind!r}; released drafters are 'llama' (LlamaGen) or 'chameleon'")


def shapes_of(net: DrafterNet) -> dict[str, tuple[int, ...]]:
    """The tensor shapes a network's weight file must hold. Read from the network the weights are
    loaded into, built first on the CPU: a build on the meta device would import torch's compiler
    stack on its first tensor, seconds that every drafter run would pay for a second build."""
    return {name: tuple(t.shape) for name, t in net.state_dict().items()}


def download_command(repo: str) -> str:
    return f"hf download {repo} config.json pytorch_model.bin --local-dir DIR"


def released_dir(source: str) -> Path:
    """A released drafter's folder: `source` is a local folder, or a hub id found in the local hub
    cache (fetched when the hub is reachable)."""
    local = Path(source).expanduser()
    if local.is_dir():
        return local
    if source.count("/") != 1 or local.exists():
        raise FileNotFoundError(f"drafter {source} is neither a folder nor a hub id like jadohu/anole_drafter")
    return hf_common.hub_dir(source, [CONFIG_FILE, "*.bin", "*.safetensors"], option="the drafter's folder")


def load_released(folder: Path, repo: str | None = None) -> DrafterNet:
    """The drafter network of a released folder, every file checked first (WeightsError in one line)."""
    how = download_command(repo) if repo else "re-download it (config.json, pytorch_model.bin)"
    config_path = folder / CONFIG_FILE
    if not config_path.exists():
        raise WeightsError(f"{config_path} not found; fetch the drafter with `{how}`")
    try:
        cfg = released_config(json.loads(config_path.read_text()))
    except (ValueError, KeyError, TypeError) as error:
        raise WeightsError(f"{config_path} is not a drafter config ({error}); fetch it again with `{how}`") from None
    weights = next((folder / name for name in RELEASED_WEIGHTS if (folder / name).exists()), None)
    if weights is None:
        raise WeightsError(f"{folder} has neither {' nor '.join(RELEASED_WEIGHTS)}; fetch the drafter with `{how}`")
    net = DrafterNet(cfg)
    if weights.suffix == ".safetensors":
        check_weight_file(weights, shapes_of(net), recorded_checksums(folder))
        from safetensors.torch import load_file

        state = load_file(str(weights))
    else:
        state = _torch_state(weights, how)
    return _loaded(net, state, weights, how)


def _torch_state(path: Path, how: str) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated zip, a corrupt pickle, a file of something else
        raise WeightsError(
            f"{path} is truncated or corrupt ({type(error).__name__}); fetch it again with `{how}`"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"{path} is not a state dict of tensors; fetch it again with `{how}`")
    return state


def _loaded(net: DrafterNet, state: dict[str, torch.Tensor], path: Path, how: str) -> DrafterNet:
    shapes = shapes_of(net)
    missing = sorted(set(shapes) - set(state))
    extra = sorted(set(state) - set(shapes))
    if missing or extra:
        what = f"lacks {missing[0]}" if missing else f"has {extra[0]}, which the config has no place for"
        more = len(missing) + len(extra) - 1
        raise WeightsError(
            f"{path} {what}{f' (and {more} more)' if more else ''}: the weights and config.json do not belong "
            f"together; fetch both with `{how}`"
        )
    for name, shape in shapes.items():
        if tuple(state[name].shape) != shape:
            raise WeightsError(
                f"{path}: tensor {name} has shape {list(state[name].shape)}, its config.json needs {list(shape)}; "
                f"fetch both with `{how}`"
            )
    net.load_state_dict({k: v.float() for k, v in state.items()})
    return net


# -- drafters trained here ------------------------------------------------------------------------
def trained_files(folder: Path, name: str) -> tuple[Path, Path]:
    return folder / f"{name}.safetensors", folder / f"{name}.json"


def load_trained(folder: Path, name: str) -> tuple[DrafterNet, dict[str, Any]]:
    """A drafter `sjdbench toy train-drafter` wrote (network, its metadata), every file checked first."""
    weights, meta_path = trained_files(folder, name)
    how = "restore it (git checkout, reinstall) or retrain with `sjdbench toy train-drafter`"
    if not meta_path.exists():
        raise WeightsError(f"drafter metadata {meta_path} not found; {how}")
    try:
        meta = json.loads(meta_path.read_text())
        cfg = DrafterConfig.from_dict(meta["config"])
    except (ValueError, KeyError, TypeError) as error:
        raise WeightsError(f"{meta_path} is corrupt or not a drafter's metadata ({error}); {how}") from None
    net = DrafterNet(cfg)
    check_weight_file(weights, shapes_of(net), recorded_checksums(folder))
    from safetensors.torch import load_file

    net.load_state_dict({k: v.float() for k, v in load_file(str(weights)).items()})
    return net, meta


def save_trained(net: DrafterNet, folder: Path, name: str, meta: dict[str, Any]) -> None:
    """Weights, metadata (the config added) and their checksums; readable like the package's files."""
    from safetensors.torch import save_file

    from sjdbench.models.weights import write_checksums

    folder.mkdir(parents=True, exist_ok=True)
    weights, meta_path = trained_files(folder, name)
    save_file({k: v.detach().cpu().float().contiguous() for k, v in net.state_dict().items()}, str(weights))
    meta_path.write_text(json.dumps({"config": net.cfg.to_dict(), **meta}, indent=2) + "\n")
    for path in (weights, meta_path):
        path.chmod(0o644)
    write_checksums(folder, [weights.name, meta_path.name])
