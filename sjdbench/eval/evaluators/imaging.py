"""Image preprocessing before CLIP, Inception and VGG-16, named after the protocols it reproduces.

Published FIDs differ most in what happens before the network: SJD feeds raw COCO images that
pytorch-fid squashes to 299x299 with a plain bilinear resize; LANTERN, LlamaGen and GigaGAN
centre-crop, Lanczos-resize to 256 and let clean-fid resize bicubically to 299. Both sides of a
comparison (generated and reference images) always go through the same function, and every step
ends in uint8 by rounding (never truncation).

    sjd    no crop; bilinear (align_corners=False, no antialiasing) to 299x299
    clean  centre crop to a square; Lanczos to 256; bicubic to 299 (clean-fid resizes in float
           per channel, as here; it then keeps floats, where we round to uint8)
    raw    unchanged; torchmetrics resizes to 299 itself (bilinear, `antialias` as set)

VGG-16 for precision / recall sees every image squashed to 224x224 by PIL's bilinear filter, as
torchvision's Resize([224, 224]) does to the PIL images of LANTERN's evaluation.
"""

from __future__ import annotations

import numpy as np

INCEPTION_SIZE = 299
VGG_SIZE = 224


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def bilinear(image: np.ndarray, size: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (size, size, 3) uint8: torch's bilinear without antialiasing (pytorch-fid's resize)."""
    import torch
    import torch.nn.functional as F

    x = torch.tensor(image, dtype=torch.float64).permute(2, 0, 1)[
        None
    ]  # (1, 3, H, W); a copy: PIL arrays are read-only
    y = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=False)
    return _to_uint8(y[0].permute(1, 2, 0).numpy())


def centre_crop(image: np.ndarray) -> np.ndarray:
    """The largest centred square (BigGAN's CenterCropLongEdge)."""
    h, w = image.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    return image[top : top + side, left : left + side]


def pil_resize(image: np.ndarray, size: int, method: str, per_channel_float: bool) -> np.ndarray:
    """PIL resize of an (H, W, 3) uint8 image; per_channel_float resizes each channel in float ('F')."""
    from PIL import Image

    resample = {
        "lanczos": Image.Resampling.LANCZOS,
        "bicubic": Image.Resampling.BICUBIC,
        "bilinear": Image.Resampling.BILINEAR,
    }[method]
    if not per_channel_float:
        return np.asarray(Image.fromarray(image).resize((size, size), resample=resample))
    channels = [
        np.asarray(Image.fromarray(image[..., c].astype(np.float32), mode="F").resize((size, size), resample=resample))
        for c in range(3)
    ]
    return _to_uint8(np.stack(channels, axis=-1))


def for_inception(image: np.ndarray, preprocess: str) -> np.ndarray:
    """An image as Inception will see it under a named protocol (uint8, (H, W, 3))."""
    if preprocess == "sjd":
        return bilinear(image, INCEPTION_SIZE)
    if preprocess == "clean":
        square = pil_resize(centre_crop(image), 256, "lanczos", per_channel_float=False)
        return pil_resize(square, INCEPTION_SIZE, "bicubic", per_channel_float=True)
    if preprocess == "raw":
        return image
    raise ValueError(f"unknown preprocessing {preprocess!r}; valid: sjd, clean, raw")


def for_vgg16(image: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (224, 224, 3) uint8: no crop, PIL bilinear (antialiased when shrinking)."""
    return pil_resize(image, VGG_SIZE, "bilinear", per_channel_float=False)


def resize_for_clip(image: np.ndarray, mode: str) -> np.ndarray:
    """Before CLIP's own transform: none, bilinear299 (SJD resizes to 299 first), crop_lanczos256 (LANTERN)."""
    if mode == "none":
        return image
    if mode == "bilinear299":
        return bilinear(image, INCEPTION_SIZE)
    if mode == "crop_lanczos256":
        return pil_resize(centre_crop(image), 256, "lanczos", per_channel_float=False)
    raise ValueError(f"unknown CLIP image resize {mode!r}; valid: none, bilinear299, crop_lanczos256")


DESCRIPTIONS = {
    "sjd": "no crop; bilinear resize (align_corners=False, no antialias) to 299x299; rounded to uint8",
    "clean": "centre crop to a square; PIL Lanczos to 256 (uint8); PIL bicubic to 299 per channel in float; "
    "rounded to uint8",
    "raw": "unchanged; torchmetrics resizes to 299 (see antialias)",
}
