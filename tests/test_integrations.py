"""Third-party libraries driving llm_zoo as their users would, with no glue in between.

One test (or a few) per library the package promises to plug into: PettingZoo's tests and wrappers,
Stable-Baselines3 and sb3-contrib's MaskablePPO, TorchRL, Tianshou, OpenSpiel, Hugging Face
datasets, TRL's SFT formatting and trainer, TensorBoard. The heavy ones run a few steps only.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from llm_zoo import kuhn_poker_v0
from llm_zoo.adapters import DiscreteActions, SingleAgent
from llm_zoo.envs.kuhn_poker.scripted import PLAYERS
from llm_zoo.trainers.rollout import collect


@pytest.fixture(autouse=True)
def _quiet_and_small():
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the libraries' own deprecation and space warnings
        yield


def discrete(num_hands: int = 1, **kwargs) -> DiscreteActions:
    return DiscreteActions(kuhn_poker_v0.env(num_hands=num_hands), **kwargs)


# ---- PettingZoo ---------------------------------------------------------------------------


def test_pettingzoo_wrappers_stack_on_the_discrete_view():
    from pettingzoo.test import api_test
    from pettingzoo.utils.wrappers import (
        AssertOutOfBoundsWrapper,
        OrderEnforcingWrapper,
        TerminateIllegalWrapper,
    )

    def wrapped():
        return OrderEnforcingWrapper(TerminateIllegalWrapper(AssertOutOfBoundsWrapper(discrete()), illegal_reward=-1))

    api_test(wrapped(), num_cycles=200)
    env = wrapped()
    env.reset(seed=0)
    assert env.last()[0]["action_mask"].tolist() == [1, 1, 0, 0]
    env.step(2)  # [call] with nothing to call: PettingZoo's wrapper ends the game, as in its classic envs
    assert all(env.terminations.values()) and env.rewards["player_0"] == -1


def test_pettingzoo_text_env_passes_its_own_tests():
    from pettingzoo.test import api_test, seed_test

    api_test(kuhn_poker_v0.env(num_hands=2), num_cycles=200)
    seed_test(lambda: kuhn_poker_v0.env(num_hands=2), num_cycles=50)


# ---- Stable-Baselines3, sb3-contrib --------------------------------------------------------


class _RandomLegal:
    """A discrete-view opponent: a uniformly random legal index."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def __call__(self, obs) -> int:
        return self.rng.choice(np.flatnonzero(obs["action_mask"]).tolist())


def _single(agent="player_0"):
    return SingleAgent(discrete(), agent, {"player_1" if agent == "player_0" else "player_0": _RandomLegal()})


def test_sb3_check_env_and_a_few_ppo_steps():
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env

    env = _single()
    check_env(env, warn=True)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu").learn(64)
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action))


def test_maskable_ppo_acts_only_within_the_mask():
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported

    env = _single("player_1")
    assert is_masking_supported(env)
    model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu").learn(64)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            mask = get_action_masks(env)
            action, _ = model.predict(obs, action_masks=mask)
            assert mask[int(action)]
            obs, _, terminated, truncated, _ = env.step(int(action))
            done = terminated or truncated


# ---- TorchRL -------------------------------------------------------------------------------


def test_torchrl_pettingzoo_wrapper_runs_the_discrete_view_as_is():
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper
    from torchrl.envs.utils import check_env_specs

    env = PettingZooWrapper(discrete(num_hands=3), use_mask=True, seed=0)
    check_env_specs(env)
    td = env.rollout(400, break_when_any_done=False)  # random actions drawn from each step's mask
    agents = ["player_0", "player_1"]
    rewards = torch.stack([td["next", a, "reward"].reshape(-1) for a in agents])  # [2, T]
    done = td["next", "done"].reshape(-1)
    assert done.sum() >= 20  # dozens of matches, each reset by TorchRL
    assert torch.all(rewards.sum(0) == 0)  # zero-sum at every step
    ends = torch.nonzero(done).reshape(-1).tolist()
    starts = [0] + [e + 1 for e in ends[:-1]]
    for start, end in zip(starts, ends):  # each match's rewards add up to the return in its infos
        for i, a in enumerate(agents):
            assert rewards[i, start:end + 1].sum() == td["next", a, "info", "return"].reshape(-1)[end]
    acting = torch.stack([td[a, "mask"].reshape(-1) for a in agents])  # who was to act at each step
    assert torch.all(acting.sum(0) == 1)
    for i, a in enumerate(agents):  # the acting agent's action was legal: no retries, no forfeits
        chosen = td[a, "action_mask"].reshape(-1, 4).gather(1, td[a, "action"].reshape(-1, 1)).reshape(-1)
        assert torch.all(chosen[acting[i]])
        assert torch.all(td["next", a, "info", "invalid_replies"] == 0)


def test_torchrl_action_spec_stays_sampleable_after_the_last_move():
    # TorchRL sets the action spec's mask from whoever is selected; after the last move that is a
    # finished agent, and an all-zero mask there made every later draw from the spec raise
    # ("invalid multinomial distribution")
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    env = PettingZooWrapper(discrete(), use_mask=True, seed=0)
    td = env.reset()
    for _ in range(10):
        td = env.rand_step(td)
        if td["next", "done"].all():
            break
        td = td["next"]
    assert td["next", "done"].all()
    assert env.full_action_spec.is_in(env.full_action_spec.rand())


# ---- Tianshou ------------------------------------------------------------------------------


def test_tianshou_collects_masked_random_play():
    from tianshou.algorithm.multiagent.marl import MultiAgentOffPolicyAlgorithm
    from tianshou.algorithm.random import MARLRandomDiscreteMaskedOffPolicyAlgorithm
    from tianshou.data import Collector
    from tianshou.env import DummyVectorEnv, PettingZooEnv

    def make():
        return PettingZooEnv(discrete())

    env = make()
    algorithm = MultiAgentOffPolicyAlgorithm(
        algorithms=[MARLRandomDiscreteMaskedOffPolicyAlgorithm(env.action_space) for _ in env.agents], env=env)
    np.random.seed(0)
    stats = Collector(algorithm, DummyVectorEnv([make, make])).collect(n_episode=16, reset_before_collect=True)
    returns = np.asarray(stats.returns)
    assert returns.shape == (16, 2)
    assert np.all(returns.sum(1) == 0) and set(np.abs(returns[:, 0])) <= {1.0, 2.0}
    assert set(np.asarray(stats.lens)) <= {2, 3}  # a Kuhn hand is two or three moves


# ---- OpenSpiel -----------------------------------------------------------------------------


def test_the_env_plays_openspiels_kuhn_poker_move_for_move():
    import pyspiel

    game, rng = pyspiel.load_game("kuhn_poker"), random.Random(0)
    cards = {"J": 0, "Q": 1, "K": 2}
    env = kuhn_poker_v0.env()
    for seed in range(60):
        env.reset(seed=seed)
        state = game.new_initial_state()
        for agent in ("player_0", "player_1"):  # OpenSpiel deals player 0's card, then player 1's
            state.apply_action(cards[env.unwrapped.infos[agent]["card"]])
        for agent in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            assert int(agent[-1]) == state.current_player()
            action = rng.choice(state.legal_actions())  # 0 = pass (check or fold), 1 = bet (bet or call)
            facing_bet = "[call]" in obs["legal_actions"]
            env.step(("[fold]", "[call]")[action] if facing_bet else ("[check]", "[bet]")[action])
            state.apply_action(action)
            if state.is_terminal():
                assert env.rewards == {"player_0": state.returns()[0], "player_1": state.returns()[1]}
        assert state.is_terminal()


# ---- Hugging Face datasets and TRL ---------------------------------------------------------


def _chat_dataset():
    import datasets

    nash = PLAYERS["nash"](seed=0)
    episodes = collect("kuhn_poker_v0", {"player_0": nash, "player_1": nash}, list(range(12)))
    return datasets.Dataset.from_list([r for e in episodes for r in e.to_chat()])


def test_episodes_export_to_a_conversational_dataset_trl_formats():
    from trl.data_utils import apply_chat_template, is_conversational

    from llm_zoo.models import build_byte_tokenizer

    ds = _chat_dataset()
    assert {"messages", "agent", "reward", "return"} <= set(ds.column_names) and len(ds) >= 24
    row = ds[0]
    assert is_conversational(row)
    text = apply_chat_template({"messages": row["messages"]}, build_byte_tokenizer())["text"]
    assert row["messages"][0]["content"][:40] in text
    assert text.rstrip().endswith(row["messages"][-1]["content"] + "<|im_end|>")


def test_trl_sft_trainer_takes_the_dataset_for_a_few_steps(tmp_path, tiny_model):
    from trl import SFTConfig, SFTTrainer

    from llm_zoo.models import build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    model = tiny_model(tokenizer, hidden_size=32)
    before = {k: v.clone() for k, v in model.named_parameters()}
    args = SFTConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-2,
                     report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, max_length=2048,
                     disable_tqdm=True, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=_chat_dataset().select_columns(["messages"]),
                         processing_class=tokenizer)
    first = trainer.train_dataset[0]["input_ids"]
    assert tokenizer.decode(first).rstrip().endswith("<|im_end|>")
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert all(not torch.equal(before[k], v) for k, v in model.named_parameters() if v.requires_grad)


# ---- TensorBoard ---------------------------------------------------------------------------


def test_tensorboard_reads_the_run_metrics(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from llm_zoo.trainers.logging import MetricsLogger

    logger = MetricsLogger(tmp_path, tensorboard=True)
    for step in (1, 2, 3):
        logger.log(step, {"eval/exploitability": 0.5 / step, "charts/reward/player": float(step)})
    logger.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"eval/exploitability", "charts/reward/player"} <= set(events.Tags()["scalars"])
    got = [(e.step, round(e.value, 6)) for e in events.Scalars("eval/exploitability")]
    assert got == [(1, 0.5), (2, 0.25), (3, round(0.5 / 3, 6))]
