"""The trainer's plug-ins (llm_zoo.trainers.plugins): config sections set field by field, former names refused by
name, each section's own checks, and the hooks' order."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo import configdoc  # noqa: E402
from llm_zoo.trainers import plugins  # noqa: E402
from llm_zoo.trainers.grpo import TrainConfig, make_config  # noqa: E402


def test_every_plugin_is_a_section_of_the_config_with_a_doc_for_each_field():
    sections = configdoc.sections(TrainConfig)
    assert set(plugins.PLUGINS) == set(sections) - {"curriculum"}  # the one section that is not a plug-in's
    assert all(configdoc.field_docs(sections["curriculum"]).values())
    for name, plugin in plugins.PLUGINS.items():
        assert sections[name] is plugin.config_class
        assert configdoc.field_docs(TrainConfig)[name], name
        assert all(configdoc.field_docs(plugin.config_class).values()), name
    assert list(plugins.PLUGINS).index("average") < list(plugins.PLUGINS).index("magnet")  # the magnet copies it


def test_a_section_merges_field_by_field_over_the_preset():
    preset = make_config("kuhn_poker_v0")
    dotted = make_config("kuhn_poker_v0", {"magnet.beta_final": 2.0})
    mapping = make_config("kuhn_poker_v0", {"magnet": {"beta_final": 2.0}})
    assert dotted == mapping
    assert dotted.magnet == dataclasses.replace(preset.magnet, beta_final=2.0)  # the preset's ema kept
    assert dotted.magnet.ema == 0.95 != plugins.MagnetConfig().ema
    built = TrainConfig(magnet={"ema": 0.9})  # a mapping given to the dataclass is built as its section
    assert isinstance(built.magnet, plugins.MagnetConfig) and built.magnet.ema == 0.9


def test_a_saved_config_reads_back_as_the_same_config(tmp_path):
    config = make_config("kuhn_poker_v0", {"average.power": 1.0, "turn_baseline.mode": "prompt"})
    saved = dataclasses.asdict(config)  # what a run directory's config.json and config.yaml hold
    assert saved["average"] == {"ema": 0.998, "debias": False, "power": 1.0}
    again = make_config("kuhn_poker_v0", configdoc.check_overrides(TrainConfig, saved, source="config.yaml"))
    assert again == config


@pytest.mark.parametrize("old, new", sorted(plugins.RENAMED.items()))
def test_a_former_flat_field_is_refused_naming_the_field_that_holds_it_now(old, new):
    assert new.partition(".")[2] in {f.name for f in dataclasses.fields(configdoc.sections(TrainConfig)[new.split(".")[0]])}
    with pytest.raises(ValueError, match=rf"config field '{old}' in .* is now '{new}'"):
        make_config("kuhn_poker_v0", {old: 0})


def test_a_section_given_a_plain_value_or_an_unknown_field_is_refused_by_name():
    with pytest.raises(ValueError, match=r"config\.magnet is a section of fields \(ema, ema_final"):
        make_config("kuhn_poker_v0", {"magnet": 0.5})
    with pytest.raises(ValueError, match=r"unknown config field 'magnet.emma'.*did you mean 'magnet.ema'"):
        make_config("kuhn_poker_v0", {"magnet.emma": 0.5})
    with pytest.raises(ValueError, match=r"config\.average\.ema expects float"):
        make_config("kuhn_poker_v0", {"average.ema": "fast"})
    with pytest.raises(ValueError, match=r"config\.average\.ema must be in \[0, 1\)"):
        make_config("kuhn_poker_v0", {"average": {"ema": 1.0}})


def test_each_section_checks_its_fit_with_the_rest_of_the_config():
    with pytest.raises(ValueError, match=r"config\.magnet\.beta_final=1\.0 moves the KL weight, which needs beta > 0"):
        make_config("kuhn_poker_v0", {"beta": 0.0})  # the preset's beta_final without a KL term
    assert make_config("kuhn_poker_v0", {"beta": 0.0, "magnet.beta_final": 0.0}).beta == 0.0


def test_train_help_lists_each_section_field_with_its_value_and_doc():
    text = configdoc.describe(make_config("kuhn_poker_v0"))
    assert "  magnet: section, set as magnet.FIELD=VALUE" in text
    assert "  magnet.ema: float = 0.95" in text and "  unmask.steps: int = 200" in text
    assert "  average.power: float = 2.0" in text
    for name, plugin in plugins.PLUGINS.items():
        for f in dataclasses.fields(plugin.config_class):
            assert f"  {name}.{f.name}: " in text


def test_enabled_returns_the_plugins_a_config_switches_on_in_table_order():
    assert plugins.enabled(TrainConfig()) == []
    names = [p.section for p in plugins.enabled(make_config("kuhn_poker_v0"))]
    assert names == ["average", "magnet", "unmask"]
    leduc = [p.section for p in plugins.enabled(make_config("leduc_poker_v0"))]
    assert leduc == ["turn_baseline", "average", "magnet"]  # a baseline per info set, no fit without the mask
    assert TrainConfig(copy_heads={"enabled": True}).model_copy_heads is True  # the model builder's name for it


def test_a_run_directorys_config_from_before_the_sections_is_refused_naming_the_new_key(monkeypatch, tmp_path, capsys):
    from llm_zoo.cli import main
    from llm_zoo.trainers import grpo

    monkeypatch.setattr(grpo, "train", lambda *a, **k: pytest.fail("train ran on a refused config"))
    path = tmp_path / "config.yaml"
    path.write_text("env: kuhn_poker_v0\nsteps: 3\nreference_ema: 0.95\naverage_ema: 0.998\n")  # the old flat form
    assert main(["train", "kuhn_poker_v0", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"config field 'reference_ema' in {path} is now 'magnet.ema'" in err and "magnet: {ema: 0.95}" in err
    path.write_text("env: kuhn_poker_v0\nsteps: 3\nmagnet: {ema: 0.9}\n")  # the new form, and --set over it
    seen = {}

    class Stop(Exception):
        pass

    def stop(config, **_):
        seen["config"] = config
        raise Stop

    monkeypatch.setattr(grpo, "train", stop)
    with pytest.raises(Stop):
        main(["train", "kuhn_poker_v0", "--config", str(path), "--set", "magnet.beta_final=2", "--run-dir",
              str(tmp_path / "run")])
    assert seen["config"].magnet == plugins.MagnetConfig(ema=0.9, ema_final=0.995, average_from=0.6, beta_final=2.0)
