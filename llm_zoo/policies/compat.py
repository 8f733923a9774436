"""Version shims for transformers and Python: the one place that knows which version does what.

Everything that differs between the versions llm_zoo supports is asked here, by feature, not by
version number: whether a model's ``forward`` takes ``logits_to_keep`` and which name its KV
cache goes by (``cache`` in recent transformers 5.x, ``past_key_values`` before), whether
transformers has per-layer caches (``DynamicLayer``), and where ``typing.override`` comes from.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Mapping
from typing import Any

from transformers import PreTrainedModel

try:
    from transformers.cache_utils import DynamicLayer
except ImportError:  # transformers from before per-layer caches: decode steps concatenate
    DynamicLayer = None

if sys.version_info >= (3, 12):
    from typing import override
else:  # typing_extensions comes with gymnasium, a core dependency
    from typing_extensions import override

__all__ = ["DynamicLayer", "cache_argument", "enable_checkpointing", "forward_params", "keep_logits_kwargs",
           "override"]


def forward_params(model: PreTrainedModel) -> Mapping[str, inspect.Parameter]:
    """Return the parameters of ``model.forward`` (an instance's patched forward, else its class's, cached); for a
    peft model (LoRA adapters) those of the model it wraps, to which it passes every keyword argument on."""
    if callable(getattr(type(model), "get_base_model", None)):
        model = model.get_base_model()
    if "forward" in vars(model):  # a forward patched onto the instance (e.g. by a hook library)
        return _signature_params(model.forward)
    return _class_forward_params(type(model))


@functools.cache
def _class_forward_params(cls: type) -> Mapping[str, inspect.Parameter]:
    # inspect.signature costs about as much as a tiny model's decode step: once per class.
    return _signature_params(cls.forward)


def _signature_params(fn: Any) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def keep_logits_kwargs(model: PreTrainedModel, n: int) -> dict[str, int]:
    """Ask the model for the last ``n`` logits only, where its forward takes ``logits_to_keep``."""
    return {"logits_to_keep": n} if "logits_to_keep" in forward_params(model) else {}


def cache_argument(model: PreTrainedModel) -> str:
    """Name the KV-cache argument and output field: ``cache`` in recent transformers 5.x (which deprecates
    ``past_key_values``, to be removed in 5.40), ``past_key_values`` before that."""
    return "cache" if "cache" in forward_params(model) else "past_key_values"


def enable_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each block's activations in the backward pass (non-reentrant, so frozen inputs still pass
    gradients to LoRA adapters): ``activation_checkpointing_enable`` in recent transformers 5.x, which deprecates
    ``gradient_checkpointing_enable``, the name before it."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if not model.get_input_embeddings().weight.requires_grad:
        # transformers makes the embeddings' output require a gradient, which reentrant checkpointing needs to reach
        # adapters above frozen weights; non-reentrant checkpointing does not, and without it frozen blocks below
        # the lowest adapted one (lora_layers) build no graph
        model.disable_input_require_grads()
