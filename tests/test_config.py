"""Every config composes; bad input fails with one clear line; run ids and labels follow the decoder
that was actually built."""

import dataclasses
import inspect
import re
import textwrap

import pytest
import yaml

from sjdbench.config import available_groups, compose_run, decoder_spec, group_choices
from sjdbench.config.identity import label, preset_decoder, run_id_for
from sjdbench.decoder_identity import PART_KINDS
from sjdbench.decoding.registry import part_choices, part_yaml, resolve_part
from sjdbench.errors import UserError


def run_id(*overrides: str) -> str:
    return run_id_for(compose_run(list(overrides)), "sha", "cpu")


def test_groups_present():
    assert {"model", "decoder", "data", "decoder/proposal", "decoder/verifier", "decoder/init"} <= set(
        available_groups()
    )


@pytest.mark.parametrize("decoder", group_choices("decoder"))
def test_every_decoder_composes(decoder):
    config = compose_run([f"decoder={decoder}", "model=debug"])
    assert config.decoder.name == decoder
    assert decoder_spec(config).window >= 1


@pytest.mark.parametrize("model", group_choices("model"))
def test_every_model_composes(model):
    assert compose_run([f"model={model}"]).model.name == model


def test_every_data_composes():
    for data in group_choices("data"):
        extra = ["data.path=prompts/smoke.txt"] if data == "file" else []
        assert compose_run([f"data={data}", *extra]).data.name == data


def test_every_yaml_opens_with_a_usage_comment():
    from sjdbench.paths import conf_dir

    for path in conf_dir().rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("#"), path


@pytest.mark.parametrize("kind", PART_KINDS)
def test_a_part_yaml_names_its_part_and_nothing_else(kind):
    """A part's knobs and their defaults live in its config dataclass only: its YAML holds the class
    it registers and a comment showing how to run it."""
    for name in part_choices(kind):
        path = part_yaml(kind, name)
        shown = yaml.safe_load(path.read_text())
        assert set(shown) == {"_target_"}, f"{kind}/{name}: {sorted(shown)}"
        assert "sjdbench run" in path.read_text(), f"{kind}/{name} shows no command"
        assert resolve_part(kind, {"name": name}, kind).target == shown["_target_"]


@pytest.mark.parametrize("kind", PART_KINDS)
def test_every_knob_is_documented_where_it_is_defined(kind):
    """Each knob of each part's config dataclass says what it does (a comment on its line), for
    readers of the code and of `sjdbench list`."""
    for name in part_choices(kind):
        config_cls = resolve_part(kind, {"name": name}, kind).cls.Config
        for f in dataclasses.fields(config_cls):
            owner = next(c for c in config_cls.__mro__ if f.name in getattr(c, "__annotations__", {}))
            lines = inspect.getsource(owner).splitlines()
            line = next(text for text in lines if re.match(rf"\s+{f.name}\s*:", text))
            assert "  # " in line, f"{kind}/{name}: knob {f.name} has no comment: {line.strip()}"


def test_a_knob_is_set_without_a_plus_and_typed_by_its_dataclass():
    """The composed tree holds the chosen part's knobs with their dataclass defaults, under the
    preset's own settings: every command line that set a knob keeps working."""
    config = compose_run(["decoder=zipar", "decoder/verifier=lantern", "decoder.verifier.delta=0.2"])
    assert config.decoder.verifier["delta"] == 0.2 and config.decoder.verifier["reading"] == "official_llamagen"
    assert config.decoder.topology["row_window"] == 1 and config.decoder.topology["row_start"] == 8  # preset, default
    assert decoder_spec(config).topology.config.emit == "all"


def test_overrides_are_typed():
    config = compose_run(["decoder=sjd_vp", "decoder.window=32", "decoder.proposal.gamma=0.25", "seed=7"])
    spec = decoder_spec(config)
    assert (spec.window, spec.proposal.config.gamma, config.seed) == (32, 0.25, 7)
    assert spec.proposal.name == "vp" and spec.proposal.children["inner"].name == "resample"


def test_a_part_is_chosen_with_either_spelling():
    a = decoder_spec(compose_run(["decoder=sjd", "decoder/verifier=lantern", "decoder.verifier.k=5"]))
    b = decoder_spec(compose_run(["decoder=sjd", "decoder.verifier=lantern", "decoder.verifier.k=5"]))
    assert a == b and a.verifier.config.k == 5


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["decoder=nope"], "unknown decoder 'nope'; choose one of: ar,"),
        (["model=nope"], "unknown model 'nope'; choose one of:"),
        (["decoder.windw=3"], "unknown config key decoder.windw"),
        (["+decoder.windw=3"], "Key 'windw' not in 'DecoderConfig'"),
        (["decoder.window=abc"], "decoder.window must be an integer, got 'abc'"),
        (
            ["decoder.verifier=foo"],
            "unknown decoder.verifier 'foo'; choose one of: cool_sd, exact, greedy, gsd, lantern, phrases",
        ),
        (["decoder.init=diag"], "choose one of: above, argmax_left, left, random"),
        (["decoder.verifier.k=5"], "the chosen verifier has no knob 'k'; k belongs to verifier lantern"),
        (["+decoder.proposal.gamma=0.3"], "proposal 'resample' has no knob 'gamma'"),
        (["decoder=lantern", "decoder.verifier.delta=-1"], "decoder.verifier.delta must be >= 0, got -1"),
        (["decoder=sjd_vp", "decoder.proposal.fusion=both"], "decoder.proposal.fusion 'both' is unknown"),
        (["decoder=sjd_vp", "decoder.proposal.inner=foo"], "unknown decoder.proposal.inner 'foo'"),
        (["decoder.lantern.k=5"], "decoder.lantern.k is no longer a key"),
        (
            ["decoder=sjd,sjd_vp"],
            "one run has one decoder; to run several, sweep over them: sjdbench sweep decoder=sjd,sjd_vp",
        ),
        (["decoder=[sjd,sjd_vp]"], "sweep over them: sjdbench sweep decoder=sjd,sjd_vp"),
        (
            ["decoder.window=16,32"],
            "`run` takes one value per key; to run several, use sjdbench sweep decoder.window=16,32",
        ),
        (["decoder.window==3"], "'decoder.window==3' has two '='; write decoder.window=3"),
        (["sampling.temperature=-1"], "sampling.temperature must be >= 0 (0 = greedy), got -1.0"),
        (["sampling.top_p=2"], "sampling.top_p must be in (0, 1] (1 = off), got 2.0"),
        (["sampling.top_p=0"], "sampling.top_p must be in (0, 1]"),
        (["sampling.cfg_scale=-1"], "sampling.cfg_scale must be >= 0"),
        (["sampling.top_k=-1"], "sampling.top_k must be >= 0 (0 = off)"),
        (["sampling.cfg_scale=nan"], "sampling.cfg_scale must be a finite number, got nan"),
        (["decoder=lantern", "decoder.verifier.delta=nan"], "decoder.verifier.delta must be a finite number"),
        (["model=toy", "model.options.temperature=-0.5"], "model.options.temperature must be >= 0"),
        (["threads=0"], "threads must be >= 1"),
        (["warmup=-1"], "warmup must be >= 0"),
        (
            ["decoder="],
            "decoder= needs a value; choose one of: ar, cool_sd, eagle, eagle2, eagle2_adt, eagle_chain, gsd",
        ),
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


def test_the_same_decoder_reached_two_ways_is_one_run():
    assert run_id("decoder=sjd", "decoder/verifier=lantern") == run_id("decoder=lantern")
    assert run_id("decoder=sjd", "decoder.window=1") == run_id("decoder=ar")
    assert label(compose_run(["decoder=sjd", "decoder/verifier=lantern"])) == "lantern"


def test_knobs_the_decoder_does_not_read_do_not_split_runs():
    """fusion=none reads none of the fusion knobs; AR reads no part at all."""
    none = run_id("decoder=sjd_vp", "decoder.proposal.fusion=none")
    assert run_id("decoder=sjd_vp", "decoder.proposal.fusion=none", "decoder.proposal.lam=0.3") == none
    assert run_id("decoder=sjd_vp", "decoder.proposal.lam=0.3") != run_id("decoder=sjd_vp")
    assert run_id("decoder=lantern", "decoder.window=1") == run_id("decoder=ar")
    noted = decoder_spec(compose_run(["decoder=sjd_vp", "decoder.proposal.fusion=none", "decoder.proposal.lam=0.3"]))
    assert any("decoder.proposal.lam does nothing" in note for note in noted.unused_settings())
    assert any(
        "does nothing at window=1" in note
        for note in decoder_spec(compose_run(["decoder=lantern", "decoder.window=1"])).unused_settings()
    )


@pytest.mark.slow  # about 16 s: composes every preset twice
def test_a_new_knob_rekeys_only_the_decoders_that_use_its_part(monkeypatch):
    """Adding a field to LANTERN's config changes the ids of LANTERN runs and of no other run."""
    from sjdbench.decoding.verifiers import lantern

    before = {name: run_id(f"decoder={name}") for name in group_choices("decoder")}

    @dataclasses.dataclass
    class Extended(lantern.LanternConfig):
        new_knob: int = 0

    monkeypatch.setattr(lantern.LanternVerifier, "Config", Extended)
    preset_decoder.cache_clear()
    after = {name: run_id(f"decoder={name}") for name in group_choices("decoder")}
    preset_decoder.cache_clear()
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"lantern", "lantern_vp", "lantern_pac", "lantern_eagle", "lantern_pp", "lantern_adt"}


@pytest.mark.slow  # about 6 s: composes every preset
def test_labels_name_the_knobs_that_differ_from_the_preset():
    assert label(compose_run(["decoder=sjd_vp"])) == "sjd_vp"
    assert (
        label(compose_run(["decoder=sjd_vp", "decoder.growth_steps=2", "decoder.proposal.lam=0.25"]))
        == "sjd_vp(N=2,λ=.25)"
    )
    assert (
        label(compose_run(["decoder=gsd", "decoder.verifier.reading=ours", "decoder.verifier.group_size=25"]))
        == "gsd(reading=ours,G=25)"
    )
    assert label(compose_run(["decoder=sjd_pp", "decoder/proposal=vp"])) == "sjd_pp+vp"
    assert label(compose_run(["decoder=sjd_vp", "decoder.proposal.inner=coupled"])) == "sjd_vp(inner=coupled)"
    assert label(compose_run(["decoder=lantern", "decoder.verifier.delta=0.2"])) == "lantern(δ=.2)"


def test_labels_distinguish_every_point_of_the_fusion_sweep():
    from sjdbench.run.plan import build_plan

    plan = build_plan(["+sweep=fusion", "model=debug", "data=smoke"], add_baselines=False)
    labels = [point.decoder_label for point in plan.points]
    assert sorted(labels) == ["sjd_vp", "sjd_vp(fusion=none)", "sjd_vp(fusion=prior)"]
    assert len({point.run_id for point in plan.points}) == 3


THROWAWAY = '''
"""A throwaway verifier for a test: accept a draft iff p(d) >= threshold."""
from dataclasses import dataclass

from sjdbench.decoding.parts import PartConfig, Verifier
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError


@dataclass
class ThresholdConfig(PartConfig):
    threshold: float = 0.2  # accept iff p(d) >= threshold

    def check(self):
        if not 0 <= self.threshold <= 1:
            raise UserError(f"threshold must be in [0, 1], got {self.threshold}")


class ThresholdVerifier(Verifier):
    Config = ThresholdConfig

    def accept(self, p, q, drafts, u):
        return p.gather(-1, drafts[:, None]).squeeze(-1) >= self.config.threshold

    def replacement(self, p, q, drafts):
        return residual(p, q)
'''


def test_a_new_part_is_one_file_plus_one_yaml(tmp_path, monkeypatch):
    """A verifier written outside the package joins by one Python file and one YAML, and runs."""
    from sjdbench.run.runner import execute

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "threshold_rule.py").write_text(THROWAWAY)
    conf = tmp_path / "conf" / "decoder" / "verifier"
    conf.mkdir(parents=True)
    (conf / "threshold.yaml").write_text(
        textwrap.dedent("""\
        # Verifier `threshold` (a test): accept iff p(d) >= threshold.
        _target_: threshold_rule.ThresholdVerifier
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.setenv("SJDBENCH_CONFIG_PATH", str(tmp_path / "conf"))
    assert "threshold" in group_choices("decoder/verifier")
    config = compose_run(
        [
            "model=debug",
            "model.options.grid_h=3",
            "model.options.grid_w=3",
            "decoder=sjd",
            "decoder/verifier=threshold",
            "decoder.verifier.threshold=0.05",
            "data=smoke",
            "data.limit=2",
            f"results_dir={tmp_path / 'results'}",
            "warmup=0",
        ]
    )
    assert label(config) == "sjd+threshold(threshold=.05)"
    outcome = execute(config)
    assert outcome.status == "finished" and outcome.summary["n_samples"] == 2
    assert outcome.summary["decoder_spec"]["verifier"] == {"name": "threshold", "threshold": 0.05}
    with pytest.raises(UserError, match="threshold must be in"):
        compose_run(["decoder/verifier=threshold", "decoder.verifier.threshold=2"])


def test_the_pairing_key_is_the_id_of_the_ar_run():
    """runkey computes the AR run's id torch-free from AR's identity; it must be the id the config
    layer gives the `ar` preset (and its greedy reading) with the same facts."""
    from sjdbench.config.identity import run_id
    from sjdbench.runkey import SampleFacts, ar_run_id

    ar = decoder_spec(compose_run(["decoder=ar"]))
    greedy_ar = decoder_spec(compose_run(["decoder=ar", "decoder/verifier=greedy"]))
    assert not ar.greedy and greedy_ar.greedy and greedy_ar.is_ar
    facts = SampleFacts("toy", {}, "smoke", "abc", {"top_k": None}, 3, 1, "cpu", "w1", 2)
    assert ar_run_id(facts) == run_id(facts, ar)
    assert ar_run_id(facts, greedy=True) == run_id(facts, greedy_ar)
    assert ar_run_id(facts, seed_offset=1) == run_id(dataclasses.replace(facts, seed=4), ar)


def test_a_part_that_cannot_be_imported_says_so_even_with_a_knob_set(tmp_path, monkeypatch):
    conf = tmp_path / "conf" / "decoder" / "verifier"
    conf.mkdir(parents=True)
    (conf / "broken.yaml").write_text("# Verifier `broken` (a test).\n_target_: nowhere_module.Broken\n")
    monkeypatch.setenv("SJDBENCH_CONFIG_PATH", str(tmp_path / "conf"))
    for overrides in (["decoder/verifier=broken"], ["decoder/verifier=broken", "decoder.verifier.delta=1"]):
        with pytest.raises(UserError, match="cannot import _target_ 'nowhere_module.Broken'"):
            compose_run(overrides)


def test_family_composes_only_the_presets_that_declare_the_same_parts(monkeypatch):
    """`family` skips presets whose YAML declares other top-level parts; the shortcut must name what
    composing every preset names: for each preset itself and for decoders built from another one."""
    import sjdbench.config.identity as identity

    for name in group_choices("decoder"):  # a plain declaration is the composed preset's own parts
        declared = identity.declared_parts(name)
        assert declared is None or declared == tuple(getattr(preset_decoder(name), k).name for k in PART_KINDS)
    specs = [preset_decoder(name) for name in group_choices("decoder")]
    specs += [
        decoder_spec(compose_run(words))
        for words in (
            ["decoder=sjd", "decoder/verifier=lantern"],
            ["decoder=ar", "decoder.window=16"],
            ["decoder=sjd", "decoder/topology=tree"],
            ["decoder=sjd_vp", "decoder/verifier=gsd"],
        )
    ]
    fast = [identity.family(spec) for spec in specs]
    monkeypatch.setattr(identity, "declared_parts", lambda name: None)  # compose every preset
    assert fast == [identity.family(spec) for spec in specs]
    assert fast[-4:] == ["lantern", "sjd", "custom", "gsd_vp"]
    assert fast[:-4] == group_choices("decoder")  # every preset is its own family
