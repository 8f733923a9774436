"""EnvSpec and the registry: every registered env's spec checks out, and envs from outside register the same way."""

from __future__ import annotations

import inspect
import sys
import warnings
from importlib import metadata

import pettingzoo
import pytest
from pettingzoo.test import api_test

import llm_zoo
from llm_zoo import spec as registry
from llm_zoo.spec import EnvSpec

BUILTIN = sorted(llm_zoo.BUILTIN_ENVS)


@pytest.fixture(autouse=True)
def _registry_restored():
    """Leave the registry as each test found it: the toy envs below must not leak into other tests."""
    specs, lazy, read = dict(registry._specs), dict(registry._lazy), registry._entry_points_read
    yield
    registry._specs.clear()
    registry._specs.update(specs)
    registry._lazy.clear()
    registry._lazy.update(lazy)
    registry._entry_points_read = read


def test_the_registry_lists_the_builtin_envs():
    assert set(BUILTIN) <= set(llm_zoo.registered())
    assert BUILTIN == ["agentic_judge_v0", "kuhn_poker_v0", "leduc_poker_v0", "proposer_solver_v0", "user_sim_v0"]


@pytest.mark.parametrize("name", BUILTIN)
def test_every_spec_checks_out(name):
    spec = llm_zoo.env_spec(name)
    assert isinstance(spec, EnvSpec) and spec.name == name
    env = spec.env()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(env, num_cycles=5)
    raw = spec.env().unwrapped
    assert raw.metadata["name"] == name
    # the declared roles are exactly the roles of the env's agents, and the learners are among them
    assert set(spec.roles) == {raw.role_of(a) for a in raw.possible_agents}
    assert spec.learning_roles and set(spec.learning_roles) <= set(spec.roles)
    # every scripted player builds by name, seeded, and answers an observation of its env
    assert spec.scripted, f"{name} has no scripted players"
    for player, factory in spec.scripted.items():
        policy = factory(seed=0)
        assert callable(getattr(policy, "act", None)), (name, player)
    if spec.corpus is not None:
        lines = list(spec.corpus())
        assert lines and all(isinstance(line, str) and line for line in lines)
    if spec.evaluate is not None:
        params = inspect.signature(spec.evaluate).parameters
        assert "play" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    # PettingZoo's own registry builds the same env
    assert pettingzoo.make("aec", spec.pettingzoo_id).unwrapped.metadata["name"] == name


def test_unknown_names_list_the_registered_envs():
    with pytest.raises(ValueError, match=r"unknown env 'kuhn_poker_v9'; expected one of \[.*'kuhn_poker_v0'"):
        llm_zoo.env_spec("kuhn_poker_v9")
    with pytest.raises(ValueError, match="unknown env"):
        llm_zoo.make_env("nope_v0")


def _toy_env(**kwargs):
    return llm_zoo.kuhn_poker_v0.env(**kwargs)


def _other_env(**kwargs):
    return llm_zoo.kuhn_poker_v0.env(**kwargs)


def test_an_env_from_outside_registers_and_is_made_by_name():
    spec = llm_zoo.register(EnvSpec(name="outside_toy_v0", env=_toy_env, roles=("player",),
                                    scripted={"nash": llm_zoo.kuhn_poker_v0.SPEC.scripted["nash"]}))
    assert llm_zoo.env_spec("outside_toy_v0") is spec
    assert "outside_toy_v0" in llm_zoo.registered()
    assert llm_zoo.make_env("outside_toy_v0", num_hands=2).unwrapped.num_hands == 2
    assert pettingzoo.make("aec", "llm_zoo/outside_toy-v0").unwrapped.metadata["name"] == "kuhn_poker_v0"
    assert spec.learning_roles == ("player",)  # empty = every role
    llm_zoo.register(EnvSpec(name="outside_toy_v0", env=_toy_env, roles=("player",)))  # the same factory again: fine
    with pytest.raises(ValueError, match="already registered"):
        llm_zoo.register(EnvSpec(name="outside_toy_v0", env=_other_env, roles=("player",)))
    # a built-in name cannot be taken over by accident, loaded or not yet loaded
    with pytest.raises(ValueError, match="already registered"):
        llm_zoo.register(EnvSpec(name="kuhn_poker_v0", env=_other_env, roles=("player",)))
    registry.register_lazy("lazy_toy_v0", "nowhere.at_all:SPEC")
    with pytest.raises(ValueError, match=r"already registered \(spec nowhere.at_all:SPEC\)"):
        llm_zoo.register(EnvSpec(name="lazy_toy_v0", env=_other_env, roles=("player",)))


def test_module_colon_name_imports_the_module_that_registers(tmp_path, monkeypatch):
    (tmp_path / "my_outside_envs.py").write_text(
        "import llm_zoo\nfrom llm_zoo.spec import EnvSpec\n"
        "SPEC = llm_zoo.register(EnvSpec(name='colon_toy_v0', env=llm_zoo.kuhn_poker_v0.env, roles=('player',)))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert llm_zoo.env_spec("my_outside_envs:colon_toy_v0").name == "colon_toy_v0"
    assert llm_zoo.env_spec("colon_toy_v0").name == "colon_toy_v0"


def test_entry_points_register_third_party_envs(tmp_path, monkeypatch):
    (tmp_path / "third_party_envs.py").write_text(
        "import llm_zoo\nfrom llm_zoo.spec import EnvSpec\n"
        "SPEC = EnvSpec(name='entry_toy_v0', env=llm_zoo.kuhn_poker_v0.env, roles=('player',))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    point = metadata.EntryPoint(name="entry_toy_v0", value="third_party_envs:SPEC", group=registry.ENTRY_POINT_GROUP)
    seen = []

    def entry_points(*, group):
        seen.append(group)
        return [point] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(registry.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry, "_entry_points_read", False)
    assert "entry_toy_v0" in llm_zoo.registered() and seen == [registry.ENTRY_POINT_GROUP]
    assert llm_zoo.make_env("entry_toy_v0").unwrapped.metadata["name"] == "kuhn_poker_v0"


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Kuhn"}, "versioned name"),
    ({"roles": ()}, "at least one role"),
    ({"learning_roles": ("judge",)}, r"learning_roles \['judge'\] are not among its roles"),
    ({"scripted": {"x": 3}}, "not: \\['x'\\]"),
    ({"corpus": ["not", "callable"]}, "corpus must be callable"),
])
def test_a_malformed_spec_is_refused_with_the_field_named(kwargs, message):
    fields = {"name": "ok_v0", "env": _toy_env, "roles": ("player",), **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        EnvSpec(**fields)


def test_a_spec_is_frozen():
    spec = llm_zoo.env_spec("kuhn_poker_v0")
    with pytest.raises(AttributeError):
        spec.roles = ("x",)
    with pytest.raises(TypeError):
        spec.scripted["x"] = None


def test_env_modules_hold_no_trainer_settings():
    for name in BUILTIN:
        module = __import__(f"llm_zoo.{name}", fromlist=["SPEC"])
        assert not {"TRAIN_DEFAULTS", "LEARNING_ROLES", "SCRIPTED", "corpus"} & set(vars(module)), name


def _judge_factory(seed=None):
    return llm_zoo.kuhn_poker_v0.SPEC.scripted["nash"](seed=seed)


JUDGED = {"name": "judged_toy_v0", "env": _toy_env, "roles": ("debater", "judge"), "learning_roles": ("debater",),
          "scripted": {"rule": _judge_factory}}


@pytest.mark.parametrize("players, message", [
    ({}, r"the roles \['judge'\] do not learn \(learning_roles=\('debater',\)\) and have no player: name one in "
         r"frozen_players"),
    ({"jury": "scripted:rule"}, r"frozen_players names the role 'jury', which is not among its roles"),
    ({"judge": "scripted:nobody"}, r"frozen_players\['judge'\] must be 'scripted:NAME' with NAME one of its scripted "
                                   r"players \['rule'\]; got 'scripted:nobody'"),
    ({"judge": "rule"}, r"must be 'scripted:NAME'.*got 'rule'"),
])
def test_every_role_that_does_not_learn_needs_a_frozen_player(players, message):
    with pytest.raises(ValueError, match=message):
        EnvSpec(**JUDGED, frozen_players=players)


def test_the_frozen_player_sits_where_no_one_else_does_and_a_role_with_none_is_refused():
    spec = EnvSpec(**JUDGED, frozen_players={"judge": "scripted:rule"})
    roles = {"debater_0": "debater", "debater_1": "debater", "judge": "judge"}
    assert spec.seat_frozen_roles({}, roles, {"debater"}) == {"judge": "scripted:rule"}
    # a seat the config names stays as named, the learner's own included
    assert spec.seat_frozen_roles({"judge": "main"}, roles, {"debater"}) == {"judge": "main"}
    assert spec.seat_frozen_roles({}, roles, {"debater", "judge"}) == {}
    # a debater that does not learn has no player in the spec: refused, naming both fixes
    with pytest.raises(ValueError, match=r"judged_toy_v0: the roles \['debater'\] do not learn.*--set "
                                         r"policies='\{debater: scripted:NAME\}' \(NAME one of \['rule'\]\).*"
                                         r"EnvSpec\(frozen_players="):
        spec.seat_frozen_roles({}, roles, {"judge"})
    assert spec.seat_frozen_roles({"debater_0": "a", "debater_1": "b"}, roles, {"judge"}) == {
        "debater_0": "a", "debater_1": "b"}


def test_the_builtin_envs_name_a_player_for_each_role_they_may_freeze():
    assert llm_zoo.env_spec("agentic_judge_v0").frozen_players == {"judge": "scripted:rule_judge"}
    assert llm_zoo.env_spec("user_sim_v0").frozen_players == {"user": "scripted:scripted"}
    assert llm_zoo.env_spec("kuhn_poker_v0").frozen_players == {}


def test_a_module_named_by_an_entry_point_registers_itself_without_a_clash(tmp_path, monkeypatch):
    (tmp_path / "self_registering_envs.py").write_text(
        "import llm_zoo\nfrom llm_zoo.spec import EnvSpec\n"
        "SPEC = llm_zoo.register(EnvSpec(name='twice_toy_v0', env=llm_zoo.kuhn_poker_v0.env, roles=('player',)))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register_lazy("twice_toy_v0", "self_registering_envs:SPEC")
    import self_registering_envs  # its own register() runs while the entry point's name is still lazy

    assert llm_zoo.env_spec("twice_toy_v0") is self_registering_envs.SPEC
    assert llm_zoo.register(self_registering_envs.SPEC) is self_registering_envs.SPEC  # again: a no-op
    # another module's env under that name is still refused
    registry.register_lazy("taken_toy_v0", "self_registering_envs:OTHER")
    with pytest.raises(ValueError, match=r"already registered \(spec self_registering_envs:OTHER\)"):
        llm_zoo.register(EnvSpec(name="taken_toy_v0", env=_other_env, roles=("player",)))
    monkeypatch.delitem(sys.modules, "self_registering_envs")


def test_a_malformed_entry_point_is_skipped_with_a_warning(monkeypatch):
    point = metadata.EntryPoint(name="Not A Name", value="x:SPEC", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry.metadata, "entry_points", lambda *, group: [point])
    monkeypatch.setattr(registry, "_entry_points_read", False)
    with pytest.warns(UserWarning, match=r"skipped the 'llm_zoo.envs' entry point Not A Name = 'x:SPEC'"):
        registry.read_entry_points()
    assert "Not A Name" not in llm_zoo.registered()


def test_the_unknown_env_error_names_the_module_form_and_hints_name_what_finds_an_env(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"or MODULE:NAME for an env that a module registers when imported "
                                         r"\(examples.haggle:haggle_v0\)"):
        llm_zoo.env_spec("lookup_v0")
    (tmp_path / "hinted_envs.py").write_text(
        "import llm_zoo\nfrom llm_zoo.spec import EnvSpec\n"
        "SPEC = llm_zoo.register(EnvSpec(name='hinted_toy_v0', env=llm_zoo.kuhn_poker_v0.env, roles=('player',)))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert llm_zoo.env_spec("hinted_envs:hinted_toy_v0").name == "hinted_toy_v0"
    assert registry.env_reference("hinted_toy_v0") == "hinted_envs:hinted_toy_v0"
    assert registry.env_reference("kuhn_poker_v0") == "kuhn_poker_v0"
    monkeypatch.delitem(sys.modules, "hinted_envs")


def test_sft_traces_seat_a_frozen_role_with_its_frozen_player():
    from llm_zoo.trainers.sft import SFTConfig, teachers_of

    scripted = {"rule": _judge_factory, "judge": _judge_factory, "talker": _judge_factory}
    spec = llm_zoo.register(EnvSpec(**{**JUDGED, "scripted": scripted}, frozen_players={"judge": "scripted:rule"}))
    roles = {"debater_0": "debater", "debater_1": "debater", "judge": "judge"}
    config = SFTConfig(env=spec.name, teachers={"debater": "talker"})
    assert teachers_of(config, spec, roles) == {"debater": ["talker"], "judge": ["rule"]}  # not the one named "judge"
