"""The offline agents: deterministic rules over metric trends, no LLM needed.

It is the default on clusters without API access and the fallback when an LLM keeps failing.
Rules, checked in this order on the parent phase's own steps ("early"/"late" = the first and
last fifth of the logged points):

1. collapse      a loss, KL or gradient norm turned NaN/inf, or rewards or validation
                 fall well below their peak after KL rose:
                 lr x0.3, KL coef x3 (at least 0.01), grad_clip x0.5; resume from the last
                 checkpoint at or before the validation peak (from the base model when
                 none was saved that early).
2. truncation    >5% of responses hit max_response_length: length x1.5 (capacity grows;
                 5% because a long answer that is a tenth of the data is worth keeping).
3. kl_spike      KL rises >5x with rewards holding: lr x0.5, KL coef x2 (at least 0.005).
4. entropy_collapse  entropy falls below a third while rewards stall: temperature +0.2,
                 clip_ratio_high up to 0.28, KL coef x0.5.
5. vanishing     validation flat and grad_norm halved: lr x2 with KL coef x1.5 (escape the
                 plateau without diverging), rollouts x2.
6. noisy         grad_norm varies more than its mean: lr x0.7, grad_clip x0.5, rollouts x2.
7. healthy       validation still rising: go on from the last checkpoint with smaller,
                 more anchored steps (lr x0.5, KL coef x1.5).
8. plateau       otherwise, sharpen: temperature -0.3 from at most 1.0 (not below 0.3), so a
                 policy that has learnt what exploration found trains on its own sharper
                 samples (on the reverse task a fixed 0.3 with the KL anchor is erratic
                 from the base, 0.62-0.86 over five seeds, while 0.7 then 0.3 matched the best fixed
                 temperature), and KL coef x0.5, since the anchor that kept early steps
                 safe now holds the policy back (at temperature 0.5, no KL from the start
                 loses 0.017, while releasing it after 80 of 120 steps gains 0.011 +- 0.005:
                 benchmarks/results/strategy_validity_reverse.json). Escaping a flat region
                 with larger steps is rule 5, when the gradients say the signal is vanishing.

Capacity (rollouts, lengths) only ever grows; regularisation (KL, temperature) moves both
ways. When a proposal would duplicate an existing sibling, or a forced fresh start would
replay the parent's configuration, the next alternative is used, each differing from the
others in several knobs: more cautious (lr x0.5, KL x1.5), bolder (lr x1.5, KL x2,
temperature +0.1), then sharper (rule 8's move), and last the parent's configuration with a
seed none of them ran with. When none of these is untried within search.space (it pins the
seed and the knobs they move), the parent takes no more children (its record says why): the
search goes on elsewhere, or ends, rather than train a configuration again.
"""
