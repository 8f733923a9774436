"""Classic baselines on llm_zoo's envs, driven through the adapters and scored like the LLM trainer.

| Module      | Baseline                                                                  | Needs                |
|-------------|---------------------------------------------------------------------------|----------------------|
| `cfr`       | CFR and CFR+ through OpenSpiel on Kuhn poker; average strategy as a table | `open_spiel`         |
| `ppo`       | sb3-contrib MaskablePPO and SB3 PPO in self-play on Kuhn's discrete view  | `sb3-contrib`, `torch` |
| `scripted`  | every env's scripted players (Kuhn: nash, random, card), as tables where tabular | core         |
| `leduc`     | CFR+, NFSP (OpenSpiel) and MaskablePPO self-play on Leduc hold'em, scored exactly | `open_spiel`, `dm-tree`, `sb3-contrib` |

On Kuhn poker each baseline exposes its strategy in the tabular form of
`llm_zoo.envs.kuhn_poker.theory`, so one exploitability function scores them all, and
`llm_zoo.policy.TabularPolicy(table)` plays any of them in the text env (as `llm-zoo
crossplay` does). The modules are imported on use, so `import llm_zoo.trainers.baselines` needs
none of the `baselines` extra.
"""

from __future__ import annotations

__all__ = ["cfr", "leduc", "ppo", "scripted"]
