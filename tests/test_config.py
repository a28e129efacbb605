"""Every config composes; bad input fails with one clear line."""
import pytest

from sjdbench.config import available_groups, compose_run, group_choices, run_id_for
from sjdbench.errors import UserError


def test_groups_present():
    assert {"model", "decoder", "data"} <= set(available_groups())


@pytest.mark.parametrize("decoder", group_choices("decoder"))
def test_every_decoder_composes(decoder):
    config = compose_run([f"decoder={decoder}", "model=debug"])
    assert config.decoder.name == decoder


@pytest.mark.parametrize("model", group_choices("model"))
def test_every_model_composes(model):
    assert compose_run([f"model={model}"]).model.name == model


def test_every_data_composes():
    for data in group_choices("data"):
        extra = ["data.path=prompts/smoke.txt"] if data == "file" else []
        assert compose_run([f"data={data}", *extra]).data.name == data


def test_every_yaml_opens_with_a_usage_comment():
    from sjdbench.config import conf_dir

    for path in conf_dir().rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("#"), path


def test_overrides_are_typed():
    config = compose_run(["decoder=sjd_vp", "decoder.window=32", "decoder.gamma=0.25", "decoder.lantern.k=5", "seed=7"])
    assert (config.decoder.window, config.decoder.gamma, config.decoder.lantern.k, config.seed) == (32, 0.25, 5, 7)
    assert config.decoder.vp is True


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["decoder=nope"], "unknown decoder 'nope'; choose one of: ar,"),
        (["model=nope"], "unknown model 'nope'; choose one of:"),
        (["decoder.windw=3"], "unknown config key decoder.windw"),
        (["+decoder.windw=3"], "Key 'windw' not in 'DecoderConfig'"),
        (["decoder.window=abc"], "could not be converted to Integer"),
        (["decoder.verifier=foo"], "unknown decoder.verifier 'foo'; choose one of: exact, greedy, lantern, gsd"),
        (["decoder.init=diag"], "choose one of: random, left, above, argmax_left"),
        (["data.shard=3"], "data.shard must look like i/n"),
        (["window=3"], "unknown config key"),
        (["decoder"], "is not an override"),
    ],
)
def test_bad_input_is_one_clear_line(overrides, needle):
    with pytest.raises(UserError) as info:
        compose_run(overrides)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_run_id_ignores_output_location_and_prompt_selection():
    a = compose_run(["results_dir=/tmp/a", "data.limit=2"])
    b = compose_run(["results_dir=/tmp/b", "data.limit=5", "decoder.trace_positions=3"])
    c = compose_run(["decoder.window=8"])
    assert run_id_for(a, "sha", "cpu") == run_id_for(b, "sha", "cpu")
    assert run_id_for(a, "sha", "cpu") != run_id_for(c, "sha", "cpu")
    assert run_id_for(a, "sha", "cpu") != run_id_for(a, "other", "cpu")
