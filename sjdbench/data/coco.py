"""MS-COCO captions as prompt sets.

coco2017: `captions_val2017.json` (5,000 images, 25,014 captions) -> one prompt per image, images in
ascending id order. `data.caption` picks the caption, per image and deterministically:
  longest     the longest caption (the first of equal length, in annotation order), as LANTERN;
  first       the first caption in annotation order;
  sjd_legacy  the caption the official SJD evaluation code picks. Its running maximum of caption
              length is never reset between images, so once it has seen a 247-character caption it
              keeps taking slot 3 of every later image: only 1,037 of the 5,000 prompts are their
              image's longest caption. Reproduced only so that SJD's published numbers can be
              compared (docs/EVALUATION.md).
Captions are kept verbatim (some end in spaces or newlines). Each prompt carries its image id and
file name, so FID references pair prompt i with image i of the val2017 folder (`data.images`).

coco2014_30k: the fixed list of 30,000 COCO 2014 val captions that LlamaGen and Janus report FID on
(LlamaGen's `evaluations/t2i/coco_captions.csv`: a `Prompt` header, then one caption per line),
read line by line and verbatim. The reference set is the val2014 folder (`data.images`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sjdbench.data.fetch import RemoteFile, resolve
from sjdbench.errors import UserError

SELECTIONS = ("longest", "first", "sjd_legacy")
ANNOTATIONS_URL = "http://images.cocodataset.org/annotations/annotations_trainval2017.zip"

LLAMAGEN_COMMIT = "ce98ec41803a74a90ce68c40ababa9eaeffeb4ec"
COCO2014_30K = RemoteFile(
    data_name="coco2014_30k",
    url=f"https://raw.githubusercontent.com/FoundationVision/LlamaGen/{LLAMAGEN_COMMIT}/evaluations/t2i/coco_captions.csv",
    sha256="716e8ab3703f1a987cc5068f9be5def6104dbe21e943708005beec426feb3ac5",
    source="FoundationVision/LlamaGen (captions: COCO, CC BY 4.0)",
)


def read_annotations(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"cannot read {path} as COCO captions JSON: {error}") from None
    if not isinstance(doc, dict) or not {"images", "annotations"} <= set(doc):
        raise UserError(
            f"{path} is not a COCO captions file: it needs 'images' and 'annotations' (captions_val2017.json)"
        )
    return doc


def captions_by_image(doc: dict) -> tuple[list[dict], dict[int, list[dict]]]:
    """Images in ascending id order, and each image's caption annotations in file order."""
    if not isinstance(doc["images"], list) or not all(
        isinstance(im, dict) and isinstance(im.get("id"), int) and isinstance(im.get("file_name"), str)
        for im in doc["images"]
    ):
        raise UserError("the captions file's 'images' must be a list of objects with an integer id and a file_name")
    if not isinstance(doc["annotations"], list) or not all(
        isinstance(a, dict)
        and isinstance(a.get("id"), int)
        and isinstance(a.get("image_id"), int)
        and isinstance(a.get("caption"), str)
        for a in doc["annotations"]
    ):
        raise UserError(
            "the captions file's 'annotations' must be a list of objects with an id, an image_id and a caption"
        )
    images = sorted(doc["images"], key=lambda im: im["id"])
    by_image: dict[int, list[dict]] = {im["id"]: [] for im in images}
    for ann in doc["annotations"]:
        if ann["image_id"] not in by_image:
            raise UserError(f"caption {ann.get('id')} refers to image {ann['image_id']}, which is not in 'images'")
        by_image[ann["image_id"]].append(ann)
    empty = [i for i, anns in by_image.items() if not anns]
    if empty:
        raise UserError(f"image {empty[0]} has no caption ({len(empty)} such images); is this a captions file?")
    return images, by_image


def select_captions(doc: dict, selection: str) -> list[tuple[dict, dict]]:
    """(image, chosen caption annotation) per image, images in ascending id order."""
    if selection not in SELECTIONS:
        raise UserError(f"unknown data.caption '{selection}'; choose one of: {', '.join(SELECTIONS)}")
    images, by_image = captions_by_image(doc)
    chosen = []
    if selection == "sjd_legacy":
        # the official code's loop: the running maximum and its slot survive from image to image
        longest_so_far, slot = 0, 0
        for image in images:
            anns = by_image[image["id"]]
            for i, ann in enumerate(anns):
                if longest_so_far < len(ann["caption"]):
                    longest_so_far, slot = len(ann["caption"]), i
            if slot >= len(anns):
                raise UserError(
                    f"sjd_legacy selection: image {image['id']} has {len(anns)} captions but the carried slot "
                    f"is {slot} (the original code fails here too); use data.caption=longest"
                )
            chosen.append((image, anns[slot]))
        return chosen
    for image in images:
        anns = by_image[image["id"]]
        if selection == "first":
            chosen.append((image, anns[0]))
        else:  # longest; max() keeps the first of equal length
            chosen.append((image, max(anns, key=lambda ann: len(ann["caption"]))))
    return chosen


def load_coco2017(data) -> list[tuple[str, dict[str, Any]]]:
    if not data.path or data.path == "???":
        raise UserError(
            "data=coco2017 needs the captions file: pass data.path=<captions_val2017.json> "
            f"(annotations/captions_val2017.json inside {ANNOTATIONS_URL})"
        )
    path = Path(data.path).expanduser()
    if not path.exists():
        raise UserError(f"data.path={path} does not exist; pass the path of captions_val2017.json")
    selection = data.caption or "longest"
    return [
        (ann["caption"], {"image_id": image["id"], "file_name": image["file_name"], "caption_id": ann["id"]})
        for image, ann in select_captions(read_annotations(path), selection)
    ]


def load_coco2014_30k(data) -> list[tuple[str, dict[str, Any]]]:
    path, _ = resolve(COCO2014_30K, data.path)
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as error:
        raise UserError(f"{path} is not UTF-8 text (at byte {error.start}); re-save it as UTF-8") from None
    if lines and lines[0].strip().lower() == "prompt":
        lines = lines[1:]
    captions = [line.rstrip("\r") for line in lines if line.strip()]
    if not captions:
        raise UserError(f"{path} contains no captions")
    return [(text, {}) for text in captions]
