"""What the real-model adapters share: the supported transformers range, where weights come from (a
local directory or the Hugging Face hub, with one clear line when they are missing), building random
weights, a prompt stand-in when no tokenizer files exist, and a transformers `Cache` view of the
shared static cache (`cache.WindowCache`). Their options (weights, size, resolution, dtype) are
checked in `options.CheckpointOptions`.

transformers and huggingface_hub are imported inside functions: listing models or loading the toy
never pays for them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

import torch

from sjdbench.errors import UserError

# The transformers versions the adapter tests pass on (5.5.0, 5.12.1 and 5.24.0 were run; 5.0-5.4
# feed Janus's `generate(generation_mode="image")` the prompt instead of the last image token, so the
# reference it is tested against is wrong there). Other versions are refused: these models' own issue
# trackers are full of breakage across transformers releases.
TRANSFORMERS_MIN = "5.5.0"
TRANSFORMERS_BELOW = "6"
TRANSFORMERS_RANGE = f">={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}"


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def require_transformers(model: str) -> Any:
    """The transformers module, or one line naming the supported range."""
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"model '{model}' needs transformers{TRANSFORMERS_RANGE}: pip install 'sjdbench[models]'"
        ) from None
    if not _version_tuple(TRANSFORMERS_MIN) <= _version_tuple(version) < _version_tuple(TRANSFORMERS_BELOW):
        raise UserError(
            f"model '{model}' is tested with transformers{TRANSFORMERS_RANGE}, but {version} is "
            f"installed: pip install 'transformers{TRANSFORMERS_RANGE}'"
        )
    import transformers

    transformers.logging.set_verbosity_error()  # deprecation chatter would bury the run's own output
    return transformers


def seed_everything(seed: int) -> None:
    """Random-weight models are built from a fixed seed, so two runs measure the same network."""
    torch.manual_seed(seed)


@contextlib.contextmanager
def building(device: str, dtype: torch.dtype) -> Iterator[None]:
    """Modules created inside are allocated on `device` in `dtype` directly: a random 7B model never
    exists in fp32 first (28 GB) or on the host."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


def init_random(module: ModuleT, std: float = 0.02) -> ModuleT:
    """The initialisation the released models were trained from (normal, std 0.02, for linear and
    embedding weights): activations of a deep random network stay finite, so random-weight runs
    exercise the same numerics as real ones."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, (torch.nn.Linear, torch.nn.Embedding)):
                sub.weight.normal_(0.0, std)
                bias = getattr(sub, "bias", None)  # embeddings have none
                if bias is not None:
                    bias.zero_()
    return module


# -- weight files -------------------------------------------------------------------------------
def local_dir(path: str | os.PathLike, required: list[str], source: str) -> Path:
    """A local directory that must hold `required` files; one line naming the missing ones and where
    they come from otherwise (the registry prefixes the model's name)."""
    root = Path(path).expanduser()
    missing = [name for name in required if not (root / name).exists()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} not found in {root}; download {source} into {root}")
    return root


def hub_dir(repo: str, patterns: list[str], option: str = "model.path") -> Path:
    """A hub snapshot (from the local cache; downloaded when the hub is reachable), or one line
    naming the files and how to fetch them without this process."""
    if any("*" in p for p in patterns):
        command = f"hf download {repo} {' '.join(f'--include {p!r}' for p in patterns)} --local-dir DIR"
    else:
        command = f"hf download {repo} {' '.join(patterns)} --local-dir DIR"
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, allow_patterns=patterns))
    except Exception as error:  # offline, not cached, gated, disk full: all end the same way
        kind = type(error).__name__
        reason = "not in the local hub cache, and the hub is offline or unreachable" if "LocalEntry" in kind else kind
        raise FileNotFoundError(
            f"{repo} ({', '.join(patterns)}) is not available here: {reason}; fetch it with "
            f"`{command}` and pass {option}=DIR"
        ) from None


def shards_present(root: Path, source: str) -> None:
    """Every shard a `*.safetensors.index.json` names must exist (a partial download fails here,
    with the missing file names, not deep inside from_pretrained)."""
    for index in root.glob("*.safetensors.index.json"):
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        local_dir(root, shards, source)


def file_fingerprint(paths: Iterable[Path]) -> str:
    """Cheap identity of weight files (name, size, mtime): a replaced checkpoint gets a new run id."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:16]


# -- prompts without a tokenizer ----------------------------------------------------------------
def stand_in_ids(text: str, first: int, count: int) -> list[int]:
    """Token ids for `text` when the model's tokenizer files are absent (weights=random): one id per
    UTF-8 byte inside [first, first + count). Images from random weights are meaningless anyway; what
    matters for timing is a prompt of realistic length."""
    return [first + (byte % count) for byte in text.encode("utf-8")]


# -- a transformers Cache over the shared static cache -----------------------------------------
def hf_cache_view(cache: Any, num_layers: int) -> Any:
    """A `transformers.Cache` whose layers store and read their keys and values through the shared
    `cache.WindowCache` (`cache.update(layer, k, v)`): the transformers model runs the same cache,
    masks and window as every other model (the adapter passes explicit 4-D masks and positions).
    Nothing is ever appended or cropped, so no allocation happens while decoding."""
    return _windowed_cache_class()(cache, num_layers)


@functools.cache
def _windowed_cache_class() -> type:
    from transformers.cache_utils import Cache, CacheLayerMixin

    class WindowedLayer(CacheLayerMixin):
        is_compileable = True
        is_sliding = False

        def __init__(self, owner: Any, index: int) -> None:
            super().__init__()
            self.owner, self.index = owner, index
            self.device, self.is_initialized = owner.device, True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            return None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            return self.owner.update(self.index, key_states, value_states)

        # the abstract interface of transformers' cache layers (its names changed within 5.x; the
        # adapters pass explicit 4-D masks and positions, so none of these is consulted)
        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return self.owner.size, 0

        def get_seq_length(self) -> int:
            return self.owner.size

        def get_max_length(self) -> int:
            return self.owner.size

        def get_max_cache_shape(self) -> int:
            return self.owner.size

    class WindowedHFCache(Cache):
        def __init__(self, owner: Any, num_layers: int) -> None:
            super().__init__(layers=[WindowedLayer(owner, i) for i in range(num_layers)])

    return WindowedHFCache


def kv_shape(lm: Any) -> Any:
    """What a transformers language model's cache holds per row and entry."""
    from sjdbench.models.cache import KVShape

    cfg = lm.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return KVShape(cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim, lm.embed_tokens.weight.dtype)


def run_hf(
    lm: Any, keyword: str, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: Any
) -> torch.Tensor:
    """A transformers language model over input vectors x (R, L, D) at rotary positions (R, L) with a
    boolean mask (R, 1, L, keys), through the cache's transformers view -> final hidden (R, L, D)."""
    additive = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(~mask, torch.finfo(x.dtype).min)
    out = lm(inputs_embeds=x, attention_mask=additive, position_ids=rotary, use_cache=True, **{keyword: cache.bound})
    return out.last_hidden_state


def cache_keyword(module: torch.nn.Module) -> str:
    """The forward keyword a transformers model takes its cache under: `cache` from 5.2x on,
    `past_key_values` before (and deprecated, not yet removed, after)."""
    import inspect

    parameters = inspect.signature(module.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def load_pretrained(model_class: Any, root: Path, dtype: torch.dtype, device: str, model: str) -> Any:
    """`from_pretrained` with SDPA attention that refuses a checkpoint missing weights (transformers
    would warn and initialise them randomly, which would silently benchmark a broken model)."""
    loaded, info = model_class.from_pretrained(root, dtype=dtype, attn_implementation="sdpa", output_loading_info=True)
    problems = {kind: info.get(kind) for kind in ("missing_keys", "mismatched_keys") if info.get(kind)}
    if problems:
        kind, keys = next(iter(problems.items()))
        keys = sorted(map(str, keys))
        raise ValueError(
            f"{root} does not match the {model_class.__name__} architecture of {model}: {len(keys)} "
            f"{kind.replace('_', ' ')}, e.g. {', '.join(keys[:3])}; re-download the checkpoint"
        )
    return loaded.to(device)


def hf_modules_eval(model: ModuleT) -> ModuleT:
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model
