"""What the real-model adapters share: the supported transformers range, where weights come from (a
local directory or the Hugging Face hub, with one clear line when they are missing), dtypes, the
weights=random switch, a prompt stand-in when no tokenizer files exist, and a transformers `Cache`
over the same two-region static layout as `llama.KVCache`.

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
from typing import Any, Iterable, Iterator

import torch

from sjdbench.errors import UserError

# The transformers versions the adapter tests pass on (5.5.0, 5.12.1 and 5.24.0 were run; 5.0-5.4
# feed Janus's `generate(generation_mode="image")` the prompt instead of the last image token, so the
# reference it is tested against is wrong there). Other versions are refused: these models' own issue
# trackers are full of breakage across transformers releases.
TRANSFORMERS_MIN = "5.5.0"
TRANSFORMERS_BELOW = "6"
TRANSFORMERS_RANGE = f">={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}"
WEIGHT_CHOICES = ("pretrained", "random")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


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


def check_weights_choice(weights: str) -> bool:
    """True for random weights; a bad value is a one-line error listing the choices."""
    if weights not in WEIGHT_CHOICES:
        raise ValueError(f"weights '{weights}' is unknown; choose one of: {', '.join(WEIGHT_CHOICES)}")
    return weights == "random"


def check_choice(what: str, value: Any, choices: Iterable[Any]) -> None:
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{what} {value!r} is not available; choose one of: {', '.join(map(str, choices))}")


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """auto: bf16 on CUDA (the precision the released pipelines use), fp32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    check_choice("dtype", dtype, ["auto", *DTYPES])
    return DTYPES[dtype]


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


def init_random(module: torch.nn.Module, std: float = 0.02) -> torch.nn.Module:
    """The initialisation the released models were trained from (normal, std 0.02, for linear and
    embedding weights): activations of a deep random network stay finite, so random-weight runs
    exercise the same numerics as real ones."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, (torch.nn.Linear, torch.nn.Embedding)):
                sub.weight.normal_(0.0, std)
                if getattr(sub, "bias", None) is not None:
                    sub.bias.zero_()
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


# -- a transformers Cache over the two-region static layout ------------------------------------
def windowed_hf_cache(
    previous: Any,
    num_layers: int,
    batch: int,
    num_kv_heads: int,
    head_dim: int,
    size: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Any:
    """A `transformers.Cache` whose layers are fixed (batch, kv_heads, size, head_dim) buffers (the
    previous image's cache when it fits: no reallocation, one class, so a compiled forward keeps its
    graph). The adapter sets `cache.write` (entries (L,)) before each forward; every layer writes its
    new keys and values there and returns the whole buffer, which the adapter's 4-D mask restricts.
    Nothing is ever appended or cropped, so no allocation happens while decoding."""
    if previous is not None and previous.fits(batch, size, dtype):
        return previous
    return _windowed_cache_class()(num_layers, batch, num_kv_heads, head_dim, size, dtype, device)


@functools.cache
def _windowed_cache_class() -> type:
    from transformers.cache_utils import Cache, CacheLayerMixin

    class WindowedLayer(CacheLayerMixin):
        is_compileable = True
        is_sliding = False

        def __init__(self, owner: Any, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
            super().__init__()
            self.owner, self.size = owner, shape[2]
            self.keys = torch.zeros(shape, dtype=dtype, device=device)
            self.values = torch.zeros(shape, dtype=dtype, device=device)
            self.device, self.is_initialized = device, True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            return None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            index = self.owner.write
            self.keys[:, :, index] = key_states.to(self.keys.dtype)
            self.values[:, :, index] = value_states.to(self.values.dtype)
            return self.keys, self.values

        # the abstract interface of transformers' cache layers (its names changed within 5.x; the
        # adapters pass explicit 4-D masks and positions, so none of these is consulted)
        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return self.size, 0

        def get_seq_length(self) -> int:
            return self.size

        def get_max_length(self) -> int:
            return self.size

        def get_max_cache_shape(self) -> int:
            return self.size

        def copy(self, source: torch.Tensor, destination: torch.Tensor) -> None:
            self.keys[:, :, destination] = self.keys[:, :, source]
            self.values[:, :, destination] = self.values[:, :, source]

    class WindowedHFCache(Cache):
        def __init__(
            self,
            num_layers: int,
            batch: int,
            num_kv_heads: int,
            head_dim: int,
            size: int,
            dtype: torch.dtype,
            device: torch.device,
        ) -> None:
            self.write = torch.zeros(0, dtype=torch.long, device=device)
            shape = (batch, num_kv_heads, size, head_dim)
            super().__init__(layers=[WindowedLayer(self, shape, dtype, device) for _ in range(num_layers)])

        def fits(self, batch: int, size: int, dtype: torch.dtype) -> bool:
            keys = self.layers[0].keys
            return keys.shape[0] == batch and keys.shape[2] == size and keys.dtype == dtype

        def copy(self, source: torch.Tensor, destination: torch.Tensor) -> None:
            """Commit: copy entries `source` (k,) to `destination` (k,) in every layer."""
            for layer in self.layers:
                layer.copy(source, destination)

    return WindowedHFCache


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


def hf_modules_eval(model: torch.nn.Module) -> torch.nn.Module:
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model
