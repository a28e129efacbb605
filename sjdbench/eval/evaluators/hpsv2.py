"""HPS v2 (Human Preference Score v2): OpenCLIP ViT-H-14 fine-tuned on human preferences between
generated images, computed per sample as the released `hpsv2` package (1.2.0) computes it.

- weights: the HPS checkpoint (`HPS_v2.1_compressed.pt`, or v2.0's `HPS_v2_compressed.pt`, from the
  hub repo xswu/HPSv2), a torch file holding {"state_dict": ...} of the whole CLIP model, which
  open_clip loads into its own ViT-H-14;
- image: RGB, to a float tensor in [0, 1], the longer side resized to 224 (bicubic, on the tensor,
  the new size rounded), zero-padded to 224 x 224 around the centre, normalised with OpenAI's CLIP
  mean and std (the package's validation transform; no crop, so nothing of the image is cut);
- text: the prompt as given, through CLIP's tokenizer (cleaned, lower-cased, cut at 77 tokens with
  the end token kept last);
- score: the cosine between the L2-normalised image and text embeddings, no logit scale, one value per
  image (what `hpsv2.score` returns and LANTERN averages); `eval.hpsv2.scale=100cos` gives the 100 *
  cosine of the HPSv2 benchmark's tables. On CUDA the package runs under float16 autocast
  (`eval.hpsv2.precision=amp`, the default here too); on the CPU autocast does nothing there or here.

Weights are never downloaded here: eval.hpsv2.weights, or the file in the Hugging Face hub cache or
~/.cache/hpsv2 ($HPS_ROOT); missing, they fail at once with one line naming the file and the command
that fetches it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.base import Sample, SampleMetric
from sjdbench.eval.evaluators.clip_score import eval_device, text_tower_extra
from sjdbench.eval.evaluators.hashing import env_flag_offline, file_sha256

HPS_REPO = "xswu/HPSv2"
HPS_FILES = {"v2.1": "HPS_v2.1_compressed.pt", "v2.0": "HPS_v2_compressed.pt"}
SCALES = {"cosine": "cosine per sample", "100cos": "100 * cosine per sample"}
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
TRANSFORM = (
    "RGB; to float in [0, 1]; longer side to {size} (bicubic on the tensor, antialias={antialias}, sides rounded); "
    "zero-padded to {size}x{size} around the centre; OpenAI CLIP mean and std"
)


def hps_weights(version: str, setting: str | None, cache_dir: str | None = None) -> Path:
    """The local HPS checkpoint: eval.hpsv2.weights, else the hub cache, else ~/.cache/hpsv2."""
    env_flag_offline()
    filename = HPS_FILES[version]
    if setting:
        path = Path(setting).expanduser()
        if not path.is_file():
            raise UserError(f"eval.hpsv2.weights={setting} is not a file; pass {filename} (HPS {version})")
        return path
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.constants import HF_HUB_CACHE

    hub = cache_dir or HF_HUB_CACHE
    cached = try_to_load_from_cache(HPS_REPO, filename, cache_dir=hub)
    if isinstance(cached, str) and Path(cached).is_file():
        return Path(cached)
    legacy = Path(os.environ.get("HPS_ROOT") or "~/.cache/hpsv2").expanduser() / filename
    if legacy.is_file():
        return legacy
    raise UserError(
        f"HPS {version} weights {filename} are not on this machine (no download is attempted): run "
        f"`hf download {HPS_REPO} {filename}` (into the hub cache {hub}), place the file in {legacy.parent}, "
        "or pass eval.hpsv2.weights=<file>"
    )


def hps_pixels(image: np.ndarray, size: int, antialias: bool):
    """(H, W, 3) uint8 -> (3, size, size) float32, as hpsv2's validation transform.

    The package pads only after a resize (an image whose longer side already is `size` would reach
    the model unpadded, and a non-square one would fail there); this pads whenever the image is not
    square, which changes nothing for the images the package can score."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).float().div(255.0)  # (3, H, W)
    height, width = x.shape[1:]
    scale = size / float(max(height, width))
    if scale != 1.0:
        new = (round(height * scale), round(width * scale))
        x = F.interpolate(x[None], size=new, mode="bicubic", align_corners=False, antialias=antialias)[0]
    pad_h, pad_w = size - x.shape[1], size - x.shape[2]
    x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=0.0)  # (3, size, size)
    mean = torch.tensor(OPENAI_MEAN).view(3, 1, 1)
    std = torch.tensor(OPENAI_STD).view(3, 1, 1)
    return (x - mean) / std


@functools.lru_cache(maxsize=1)
def load_hps(model: str, weights: str, kwargs_json: str, device: str):
    """(model, tokenizer), loaded once per process; open_clip reads the {"state_dict": ...} layout
    and loads it strictly (every key of the architecture, no other)."""
    env_flag_offline()
    import pickle

    import open_clip

    kwargs = json.loads(kwargs_json)
    try:
        net = open_clip.create_model(model, pretrained=weights, device=device, **kwargs)
    except (RuntimeError, KeyError, ValueError, EOFError, OSError, pickle.UnpicklingError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(
            f"{weights} is not an HPS checkpoint for open_clip's {model} ({first[:200]}); fetch it with "
            f"`hf download {HPS_REPO} {HPS_FILES['v2.1']}` or pass eval.hpsv2.weights=<file>"
        ) from None
    context = kwargs.get("text_cfg", {}).get("context_length")
    tokenizer = open_clip.get_tokenizer(model, **({"context_length": context} if context else {}))
    return net.eval(), tokenizer


class Hpsv2(SampleMetric):
    name = "hpsv2"
    cache_kind = "hps_cosine"

    def __init__(self, settings, run) -> None:
        super().__init__(settings, run)
        self.hps = settings.hpsv2
        self.metric = f"HPS {self.hps.version} ({SCALES[self.hps.scale]})"

    @functools.cached_property
    def weights(self) -> Path:
        return hps_weights(self.hps.version, self.hps.weights)

    @property
    def device(self) -> str:
        return eval_device(self.settings.device)

    @property
    def autocast(self) -> bool:
        """float16 autocast, as the package runs on CUDA; the package's autocast does nothing on the CPU."""
        return self.hps.precision == "amp" and self.device.startswith("cuda")

    def _loaded(self):
        kwargs = json.dumps(dict(self.hps.model_kwargs), sort_keys=True)
        return load_hps(self.hps.model, str(self.weights), kwargs, self.device)

    def _image_size(self, net) -> int:
        size = net.visual.image_size
        return int(size[0] if isinstance(size, (tuple, list)) else size)

    def measure_protocol(self) -> dict:
        net, tokenizer = self._loaded()
        size = self._image_size(net)
        return {
            "backbone": f"open_clip {self.hps.model}",
            "checkpoint": f"HPS {self.hps.version} ({HPS_REPO}, {HPS_FILES[self.hps.version]})",
            "weights_file": self.weights.name,
            "weights_sha256": file_sha256(self.weights),
            "model_kwargs": dict(self.hps.model_kwargs),
            "image_transform": TRANSFORM.format(size=size, antialias=self.hps.antialias),
            "prompt": "as given, no prefix",
            "context_length": int(tokenizer.context_length),
            "truncation": "prompts longer than the context are cut, keeping the end-of-text token last (as CLIP)",
            "precision": "float16 autocast (CUDA)" if self.autocast else "float32",
            "embedding": "L2-normalised image and text embeddings; cos = their dot product (no logit scale)",
        }

    def protocol_extras(self) -> dict:
        return {"score": SCALES[self.hps.scale], "aggregate": "mean over samples"}

    def measure(self, samples: list[Sample]) -> np.ndarray:
        import contextlib

        import torch

        net, tokenizer = self._loaded()
        size = self._image_size(net)
        device = next(net.parameters()).device
        out = []
        for start in range(0, len(samples), self.hps.batch_size):
            batch = samples[start : start + self.hps.batch_size]
            pixels = torch.stack([hps_pixels(image, size, self.hps.antialias) for image in self.images(batch)])
            tokens = tokenizer([s.text for s in batch]).to(device)
            precision = torch.autocast("cuda", dtype=torch.float16) if self.autocast else contextlib.nullcontext()
            with torch.no_grad(), precision:
                image_emb = net.encode_image(pixels.to(device), normalize=True)  # (B, E)
                text_emb = net.encode_text(tokens, normalize=True)  # (B, E)
                cosines = torch.diagonal(image_emb @ text_emb.T)  # (B,) as the package: the matmul's diagonal
            out.append(cosines.double().cpu().numpy())
        return np.concatenate(out)[:, None]

    def sample_values(self, vectors: np.ndarray) -> np.ndarray:
        cos = vectors[:, 0]
        return 100.0 * cos if self.hps.scale == "100cos" else cos

    def extra(self, vectors: np.ndarray) -> dict:
        _, tokenizer = self._loaded()
        return text_tower_extra(vectors, self.run.samples, tokenizer.encode, int(tokenizer.context_length))
