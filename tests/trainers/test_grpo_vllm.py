"""The trainer's ``generation=vllm`` path on a real engine (vLLM's CPU build in CI's vLLM stage).

A short Kuhn poker run samples every learner turn with a VLLMPolicy; before each update the test
rescores the batch the engine sampled with the learner's own model (the weights the update starts
from) and checks that the sampling log-probs equal it, so each update after the first proves that
the previous update's weights were pushed into the running engine. Skipped without vLLM, except
under ``LLM_ZOO_REQUIRE_VLLM=1`` (the vLLM stage), where a missing vLLM fails.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.policies import vllm as vllm_policy  # noqa: E402
from llm_zoo.policies.transformers import completion_logprobs  # noqa: E402
from llm_zoo.trainers import grpo  # noqa: E402

pytestmark = pytest.mark.vllm

TOLERANCE = 1e-3
"""Max |sampling log-prob - learner log-prob| per token, both in float32."""


def _require_vllm() -> None:
    missing = vllm_policy.missing_requirements(gpu=False)
    if missing is None:
        return
    if os.environ.get("LLM_ZOO_REQUIRE_VLLM") == "1":
        pytest.fail(f"LLM_ZOO_REQUIRE_VLLM=1 (scripts/test.sh's vLLM stage) but this environment {missing}")
    pytest.skip(missing)


def test_generation_vllm_samples_with_the_weights_of_the_latest_update(tmp_path, monkeypatch):
    _require_vllm()
    seen: list[dict[str, float]] = []
    acts = {"n": 0}
    original_update, original_act = grpo.update, vllm_policy.VLLMPolicy.act

    def checked_update(learner, batch, config, **kwargs):
        prompts, completions = [b.prompt_ids for b in batch], [b.completion_ids for b in batch]
        with torch.inference_mode():
            now, _ = completion_logprobs(learner.model, prompts, completions, pad_token_id=learner.policy.pad_token_id,
                                         temperature=config.temperature or 1.0, allowed=[b.allowed for b in batch])
        worst = max(abs(a - b) for i, s in enumerate(batch) for a, b in zip(s.logprobs, now[i, :len(s.logprobs)].tolist()))
        # a sum of squares: a plain sum can stay put (the softmax gradient of a row sums to zero)
        checksum = float(sum((p.double() ** 2).sum() for p in learner.model.parameters()))
        seen.append({"learner": learner.name, "worst": worst, "checksum": checksum, "samples": len(batch)})
        return original_update(learner, batch, config, **kwargs)

    def counted_act(self, observations):
        acts["n"] += 1
        return original_act(self, observations)

    monkeypatch.setattr(grpo, "update", checked_update)
    monkeypatch.setattr(vllm_policy.VLLMPolicy, "act", counted_act)
    config = grpo.make_config("kuhn_poker_v0", {
        "generation": "vllm", "steps": 3, "episodes_per_step": 16, "model_hidden_size": 128, "eval_every": 0,
        "checkpoint_every": 0, "sample_every": 0, "progress": False, "tensorboard": False, "threads": 1,
        "run_dir": str(tmp_path / "run"), "lr": 0.05, "warmup_steps": 0,
    })
    assert config.constrain_to_legal  # Kuhn's preset: the engine constrains to the legal replies too
    grpo.train(config)

    assert acts["n"] > 0  # the rollouts went through the engine
    by_learner: dict[str, list[dict[str, float]]] = {}
    for record in seen:
        by_learner.setdefault(record["learner"], []).append(record)
    assert len(by_learner) == 2 and all(len(r) == 3 for r in by_learner.values()), seen  # a learner per seat
    for records in by_learner.values():
        assert all(r["samples"] > 0 and r["worst"] < TOLERANCE for r in records), records
        checksums = [r["checksum"] for r in records]
        assert len(set(checksums)) == 3, checksums  # every update moved the weights the engine must follow
