"""Tests of the PPO self-play baselines: the strategy read-out is exact, and the models play through the adapters."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llm_zoo import kuhn_poker_v0
from llm_zoo.adapters import DiscreteActions
from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.envs.kuhn_poker.env import MENU

torch = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")
from llm_zoo.trainers.baselines import ppo  # noqa: E402

MOVES = ("check", "bet", "call", "fold")  # the env's feature layout: one-hot per position, moves in this order
TINY = {"n_steps": 32, "batch_size": 64, "n_epochs": 2}


@pytest.fixture(scope="module")
def maskable():
    torch.set_num_threads(1)
    return ppo.train_maskable_ppo(128, seed=0, n_envs=2, model_kwargs=TINY)


def decode(features: np.ndarray) -> str:
    """Read an info set back from a feature vector, independently of `info_set_inputs`."""
    card = theory.CARDS[int(np.argmax(features[:3]))]
    moves = [MOVES[int(np.argmax(block))] for block in features[3:15].reshape(3, 4) if block.any()]
    return f"{card}:{','.join(moves)}"


@pytest.mark.parametrize("alpha", [0.0, 1 / 6, 1 / 3])
def test_a_known_policy_round_trips_through_the_read_out(alpha):
    nash = theory.nash_policy(alpha)

    def probabilities(features, masks):
        out = np.zeros(masks.shape)
        for row, vector in zip(out, features):
            for move, p in nash[decode(vector)].items():
                row[MENU.index(f"[{move}]")] = p
        return out

    table, illegal = ppo.tabular_from_probabilities(probabilities)
    assert theory.exploitability(table) < 1e-9
    assert table == theory.validate_policy(nash)
    assert set(illegal.values()) == {0.0}


def test_info_set_inputs_are_what_the_env_shows():
    features, masks = ppo.info_set_inputs()
    rows = {info_set: (f, m) for info_set, f, m in zip(theory.INFO_SETS, features, masks)}
    env, rng, seen = DiscreteActions(kuhn_poker_v0.env()), random.Random(0), set()
    for seed in range(60):
        env.reset(seed=seed)
        for agent in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            info_set = env.unwrapped.observe(agent)["info_set"]
            assert np.array_equal(obs["observation"], rows[info_set][0]), info_set
            assert np.array_equal(obs["action_mask"].astype(bool), rows[info_set][1]), info_set
            seen.add(info_set)
            env.step(rng.choice(np.flatnonzero(obs["action_mask"]).tolist()))
    assert seen == set(theory.INFO_SETS)


def test_maskable_ppo_table_is_its_own_policy(maskable):
    model, table = maskable.model, maskable.policy
    features, masks = ppo.info_set_inputs()
    torch.manual_seed(0)
    for info_set, vector, mask in zip(theory.INFO_SETS, features, masks):
        row = table[info_set]
        # greedy: predict's deterministic action is the table's most likely move
        greedy = int(model.predict(vector, action_masks=mask, deterministic=True)[0])
        assert MENU[greedy] == f"[{max(row, key=row.get)}]"
        # probabilities: the policy's own log-probs of each legal move equal the table's entries
        legal = np.flatnonzero(mask)
        obs = torch.as_tensor(np.repeat(vector[None], len(legal), 0))
        _, log_prob, _ = model.policy.evaluate_actions(obs, torch.as_tensor(legal), np.repeat(mask[None], len(legal), 0))
        for action, lp in zip(legal, log_prob.exp().tolist()):
            assert lp == pytest.approx(row[MENU[action].strip("[]")], abs=1e-6)
        # sampling: predict's stochastic actions follow the table (600 draws: 3 sd < 0.062)
        draws = model.predict(np.repeat(vector[None], 600, 0), action_masks=np.repeat(mask[None], 600, 0))[0]
        assert set(draws.tolist()) <= set(legal.tolist())
        first = MENU[legal[0]].strip("[]")
        assert np.mean(draws == legal[0]) == pytest.approx(row[first], abs=0.08)


def test_self_play_result_accounts_for_its_budget(maskable):
    assert maskable.timesteps >= 128 and maskable.episodes > 0 and maskable.seconds > 0
    assert maskable.exploitability == theory.exploitability(maskable.policy)
    assert maskable.illegal_mass == 0.0
    assert [h["timesteps"] for h in maskable.history] == [64 * (k + 1) for k in range(len(maskable.history))]
    assert maskable.average_exploitability == pytest.approx(theory.exploitability(maskable.average_policy))


def test_a_seed_replays_the_run():
    first, second = (ppo.train_maskable_ppo(64, seed=5, n_envs=2, model_kwargs=TINY) for _ in range(2))
    assert first.policy == second.policy and first.episodes == second.episodes


def test_save_and_load_keep_the_strategy(maskable, tmp_path):
    maskable.model.save(tmp_path / "model")
    loaded = ppo.load(tmp_path / "model")
    assert type(loaded).__name__ == "MaskablePPO"
    table = ppo.tabular_strategy(loaded)[0]
    for info_set, row in maskable.policy.items():
        assert table[info_set] == pytest.approx(row, abs=1e-7)
    with pytest.raises(FileNotFoundError, match="no saved PPO model"):
        ppo.load(tmp_path / "missing")


def test_plain_ppo_reads_out_a_legal_strategy_and_its_illegal_mass():
    torch.set_num_threads(1)
    result = ppo.train_ppo(64, seed=1, n_envs=2, model_kwargs=TINY)
    assert type(result.model).__name__ == "PPO"
    assert 0.0 < result.illegal_mass < 1.0  # unmasked: some mass on moves the env refuses
    features, masks = ppo.info_set_inputs()
    probs = ppo.action_probabilities(result.model)(features, masks)
    for info_set, row, mask in zip(theory.INFO_SETS, probs, masks):
        legal = row[mask]
        for move, p in zip([MENU[i].strip("[]") for i in np.flatnonzero(mask)], legal / legal.sum()):
            assert result.policy[info_set][move] == pytest.approx(p, abs=1e-9)


def test_average_policy_is_the_uniform_mixture_of_the_tables():
    rng = random.Random(0)

    def random_table():
        out = {}
        for info_set in theory.INFO_SETS:
            p, (a, b) = rng.random(), theory.legal_moves(info_set)
            out[info_set] = {a: p, b: 1 - p}
        return out

    tables, opponent = [random_table() for _ in range(3)], random_table()
    average = ppo.average_policy(tables)
    # Kuhn's theorem (perfect recall): the reach-weighted behaviour strategy pays what the mixture pays
    assert theory.game_value(average, opponent) == pytest.approx(
        sum(theory.game_value(t, opponent) for t in tables) / 3, abs=1e-12)
    assert theory.game_value(opponent, average) == pytest.approx(
        sum(theory.game_value(opponent, t) for t in tables) / 3, abs=1e-12)
    with pytest.raises(ValueError, match="at least one table"):
        ppo.average_policy([])


def test_supersuit_route_refuses_kuhn_and_says_why():
    pytest.importorskip("supersuit")
    with pytest.raises(ValueError, match="turn-based with no fixed cycle.*SingleAgent"):
        ppo.supersuit_vec_env(DiscreteActions(kuhn_poker_v0.env()))


def test_supersuit_route_trains_plain_ppo_on_a_parallelizable_env():
    pytest.importorskip("supersuit")
    from pettingzoo.classic import rps_v2
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    vec = ppo.supersuit_vec_env(rps_v2.env(), num_envs=2)
    assert vec.num_envs == 4  # 2 copies x 2 agents, one policy for both
    model = PPO("MlpPolicy", vec, n_steps=16, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(64)
    assert model.num_timesteps == 64


def test_bad_budgets():
    with pytest.raises(ValueError, match="timesteps must be an integer >= 1"):
        ppo.train_maskable_ppo(0)
    with pytest.raises(ValueError, match="pool_size must be an integer >= 1"):
        ppo.train_ppo(10, pool_size=0)
