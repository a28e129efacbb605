"""Public prompt sets: PartiPrompts read verbatim with its metadata, COCO caption selection
(longest / first / the official SJD code's carried-over slot), the 30k list, pinned downloads."""

import io
import urllib.error
from pathlib import Path

import pytest

from sjdbench.config import compose_run
from sjdbench.data import coco, fetch, parti
from sjdbench.data.prompts import Prompt, load_prompts
from sjdbench.errors import UserError

DATA = Path(__file__).parent / "data" / "eval"


def test_parti_keeps_quotes_whitespace_and_metadata():
    prompts, sha = load_prompts(compose_run(["data=parti", f"data.path={DATA / 'parti_fixture.tsv'}"]).data)
    texts = [p.text for p in prompts]
    assert len(prompts) == 5  # the empty last line is not a prompt
    assert texts[2] == '"G I G G L E" painted in thick colorful lines'  # default CSV quoting would drop the quotes
    assert texts[3] == " A sloth in a go kart on a race track. "  # leading and trailing spaces kept
    assert texts[4] == "a cafeé sign with umeño letters"
    assert 'The words "Fly an airplane" are written' in texts[1]
    assert prompts[0].meta == {
        "category": "Abstract",
        "challenge": "Basic",
        "note": "Biology-inspired concepts with multiple meanings",
    }
    assert prompts[3].meta["challenge"] == "Imagination" and prompts[1].meta["note"] == ""
    assert len(sha) == 16


def test_prompt_without_metadata_still_constructs_and_compares_by_id_and_text():
    assert Prompt(3, "a cat") == Prompt(3, "a cat", {"category": "Animals"})
    assert Prompt(3, "a cat").meta == {}


def test_parti_file_with_other_columns_is_refused(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("prompt\tcolour\nred\tred\n")
    with pytest.raises(UserError, match="expected the columns Prompt, Category, Challenge, Note"):
        parti.parse(bad)


def test_parti_without_a_file_names_the_fetch_command_and_data_path(tmp_path, monkeypatch):
    monkeypatch.setenv("SJDBENCH_CACHE", str(tmp_path))
    with pytest.raises(UserError) as error:
        load_prompts(compose_run(["data=parti"]).data)
    message = str(error.value)
    assert "sjdbench data fetch parti" in message and "data.path=" in message and "\n" not in message


def test_coco_selections_on_a_fixture_in_the_annotation_file_structure():
    doc = coco.read_annotations(DATA / "captions_fixture.json")

    def chosen(selection):
        return [ann["id"] for _, ann in coco.select_captions(doc, selection)]

    assert chosen("longest") == [102, 204, 302, 402]  # images in ascending id order
    assert chosen("first") == [101, 201, 301, 401]
    # the official SJD loop carries its running maximum (45 characters, slot 3) into image 30, whose
    # longest caption (43) is shorter, so it takes that image's slot 3 ("A bus.") instead
    assert chosen("sjd_legacy") == [102, 204, 304, 402]


def test_coco2017_prompts_are_verbatim_with_image_ids_and_file_names():
    path = DATA / "captions_fixture.json"
    prompts, _ = load_prompts(compose_run(["data=coco2017", f"data.path={path}"]).data)  # default: longest
    assert prompts[2].text == "A red double-decker bus in a London street\n"  # trailing newline kept
    assert prompts[0].meta == {"image_id": 10, "file_name": "000000000010.jpg", "caption_id": 102}
    legacy, legacy_sha = load_prompts(
        compose_run(["data=coco2017", f"data.path={path}", "data.caption=sjd_legacy"]).data
    )
    _, longest_sha = load_prompts(compose_run(["data=coco2017", f"data.path={path}"]).data)
    assert legacy[2].text == "A bus." and legacy_sha != longest_sha  # another selection is another run


def test_coco_legacy_selection_fails_clearly_where_the_original_code_crashes():
    doc = {
        "images": [{"id": 1, "file_name": "a"}, {"id": 2, "file_name": "b"}],
        "annotations": [
            {"image_id": 1, "id": 1, "caption": "x"},
            {"image_id": 1, "id": 2, "caption": "longer"},
            {"image_id": 2, "id": 3, "caption": "y"},
        ],
    }
    with pytest.raises(UserError, match="carried slot is 1"):
        coco.select_captions(doc, "sjd_legacy")


def test_coco_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="choose one of: longest, first, sjd_legacy"):
        coco.select_captions(coco.read_annotations(DATA / "captions_fixture.json"), "random")
    with pytest.raises(UserError, match="data.path=<captions_val2017.json>"):
        load_prompts(compose_run(["data=coco2017"]).data)
    other = tmp_path / "other.json"
    other.write_text('{"categories": []}')
    with pytest.raises(UserError, match="not a COCO captions file"):
        load_prompts(compose_run(["data=coco2017", f"data.path={other}"]).data)


def test_coco2014_30k_reads_one_caption_per_line_verbatim(tmp_path):
    path = tmp_path / "coco_captions.csv"
    path.write_text(
        'Prompt\nA furry, black bear standing in a rocky area.\n"Head shot" of a zebra. \n\nA cat.', encoding="utf-8"
    )
    prompts, _ = load_prompts(compose_run(["data=coco2014_30k", f"data.path={path}"]).data)
    assert [p.text for p in prompts] == [
        "A furry, black bear standing in a rocky area.",
        '"Head shot" of a zebra. ',
        "A cat.",
    ]


def test_fetch_verifies_the_pinned_checksum_and_fails_offline_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SJDBENCH_CACHE", str(tmp_path))
    content = (DATA / "parti_fixture.tsv").read_bytes()
    remote = fetch.RemoteFile("parti", "https://example.invalid/PartiPrompts.tsv", "0" * 64, "test")

    def offline(url, timeout):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(fetch.urllib.request, "urlopen", offline)
    with pytest.raises(UserError) as error:
        fetch.fetch(remote)
    assert "cannot download PartiPrompts.tsv" in str(error.value) and "data.path=" in str(error.value)
    assert not remote.cached().exists()

    monkeypatch.setattr(fetch.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(content))
    with pytest.raises(UserError, match="not the pinned"):  # wrong bytes are never saved
        fetch.fetch(remote)
    assert not remote.cached().exists()
    pinned = fetch.RemoteFile("parti", remote.url, fetch.sha256_of(DATA / "parti_fixture.tsv"), "test")
    assert fetch.fetch(pinned).read_bytes() == content
    prompts, _ = load_prompts(compose_run(["data=parti"]).data)  # now found in the cache
    assert len(prompts) == 5


def test_the_pinned_parti_file_is_the_published_one():
    assert parti.PARTI.sha256 == "fab29e41bb512a169b56acab4cf2a41dcb675e285df2efcde6640c7dd3c440eb"
    assert parti.COMMIT in parti.PARTI.url and parti.PARTI.url.startswith(
        "https://raw.githubusercontent.com/google-research/parti/"
    )
