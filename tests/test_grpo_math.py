"""The CPU trainer's GRPO terms against verl 0.9.1's definitions (core_algos)."""
from __future__ import annotations

import pytest
import torch

from llmzero_slurm.cputrain.grpo import kl_penalty


@pytest.mark.parametrize("kind", ["low_var_kl", "k3"])
def test_the_low_variance_kl_has_finite_gradients_far_from_the_reference(kind):
    """exp(ref - logp) overflowed once the policy put a token ~89 nats below the reference
    (a pad position after EOS under a low temperature): the forward clamp hid it, and the
    backward pass gave NaN, so the step was skipped and the run stopped learning. verl clamps
    the log-ratio to +-20 before the exponential."""
    logp = torch.tensor([-100.0, -1.0, 0.0], requires_grad=True)
    ref = torch.tensor([0.0, -1.5, -30.0])
    kl = kl_penalty(logp, ref, kind)
    kl.sum().backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()
    assert kl[0].item() == 10.0                        # clamped, as verl's
    diff = torch.tensor(0.5)                           # within range: the estimator itself
    assert kl[1].item() == pytest.approx(float(torch.exp(-diff) + diff - 1))
