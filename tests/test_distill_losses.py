"""The distillation's divergences (polyvox.train.distill_losses): one parameterisation in every direction,
hand-computed cases, GKD's generalized JSD, the near-one-hot gradient (issue 22) and the step log's
gradient norms in a 2-step CPU distillation of the tiny model."""
import json
import math

import pytest

torch = pytest.importorskip("torch")

from polyvox.train import distill_losses as D  # noqa: E402
from polyvox.train.distill import DistillConfig, manifest_settings, topk_kl, train  # noqa: E402

CASES = [("forward", None), ("reverse", None), ("jsd", 0.0), ("jsd", 0.5), ("jsd", 1.0), ("jsd", 0.1)]


def _logits(*probs):
    return torch.tensor(probs, dtype=torch.float64).log().float()


def _kl(a, b):
    return sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)


def _jsd(p, q, beta):
    m = [beta * x + (1 - beta) * y for x, y in zip(p, q)]
    return beta * _kl(p, m) + (1 - beta) * _kl(q, m)


@pytest.mark.parametrize("loss, beta", CASES)
@pytest.mark.parametrize("k, tau", [(4, 1.0), (50, 1.0), (4, 2.0)])
def test_identical_teacher_and_student_give_zero_loss_and_zero_gradient(loss, beta, k, tau):
    torch.manual_seed(0)
    t = torch.randn(3, 5, 50) * 3
    s = t.clone().requires_grad_(True)
    per, s_mass, t_mass = D.distill_loss(s, t, k, loss, beta, tau)
    per.sum().backward()
    assert per.abs().max() < 1e-6 and s.grad.abs().max() < 1e-6
    assert torch.allclose(s_mass, t_mass)


def test_three_token_vocabulary_by_hand():
    p, q = (0.7, 0.2, 0.1), (0.5, 0.3, 0.2)
    t, s = _logits(p), _logits(q)
    # k = vocabulary: the exact full-vocabulary divergences
    for loss, beta, want in [("forward", None, _kl(p, q)), ("reverse", None, _kl(q, p)),
                             ("jsd", 0.5, _jsd(p, q, 0.5)), ("jsd", 0.2, _jsd(p, q, 0.2))]:
        assert D.distill_loss(s, t, 3, loss, beta)[0].item() == pytest.approx(want, rel=1e-5)
    # k = 1 and the same top id: the atoms are {0} and rest = {1, 2}, for every direction alike
    pc, qc = (0.7, 0.3), (0.5, 0.5)
    for loss, beta, want in [("forward", None, _kl(pc, qc)), ("reverse", None, _kl(qc, pc)),
                             ("jsd", 0.5, _jsd(pc, qc, 0.5))]:
        per, s_mass, t_mass = D.distill_loss(s, t, 1, loss, beta)
        assert per.item() == pytest.approx(want, rel=1e-5)
        assert (s_mass.item(), t_mass.item()) == (pytest.approx(0.5), pytest.approx(0.7))
    # k = 1 and different top ids: the atoms are the union {0, 1} and rest = {2}
    q2 = (0.3, 0.5, 0.2)
    assert D.distill_loss(_logits(q2), t, 1, "reverse")[0].item() == pytest.approx(_kl(q2, p), rel=1e-5)


def test_forward_and_reverse_are_one_divergence_in_two_directions():
    """Swapping the roles of teacher and student turns forward into reverse exactly (the same atoms,
    the same normalisation), and both directions see the student's mass outside K: moving student mass
    from outside K into it (relative probabilities inside K kept) changes both losses. The recorded
    runs' v1 reverse renormalised the student over its own top-k, so it did not see that move."""
    torch.manual_seed(1)
    a, b = torch.randn(4, 6, 80) * 2, torch.randn(4, 6, 80) * 2
    for k in (4, 16):
        fwd = D.distill_loss(a, b, k, "forward")[0]
        rev = D.distill_loss(b, a, k, "reverse")[0]
        assert torch.allclose(fwd, rev, atol=1e-5)
    k = 4
    inside = torch.zeros_like(a, dtype=torch.bool).scatter(-1, a.topk(k, -1).indices, True)
    inside |= torch.zeros_like(a, dtype=torch.bool).scatter(-1, b.topk(k, -1).indices, True)
    sharper = torch.where(inside, a, a - 3.0)  # less student mass outside K, same ratios inside it
    for loss in ("forward", "reverse"):
        before, after = D.distill_loss(a, b, k, loss)[0], D.distill_loss(sharper, b, k, loss)[0]
        assert (before - after).abs().min() > 1e-4
    v1_before, v1_after = D.topk_kl_v1(a, b, k, "reverse")[0], D.topk_kl_v1(sharper, b, k, "reverse")[0]
    assert torch.allclose(v1_before, v1_after, atol=1e-5)  # v1 reverse: blind to it
    assert (D.topk_kl_v1(a, b, k, "forward")[0] - D.topk_kl_v1(sharper, b, k, "forward")[0]).abs().min() > 1e-4


def test_jsd_endpoints_and_limits():
    """GKD's convention (TRL): β = 0 is the forward KL, β = 1 the reverse KL; in between JSD(β)/β → forward
    as β → 0 and JSD(β)/(1 − β) → reverse as β → 1, values and gradients (a student that is not
    saturated)."""
    torch.manual_seed(2)
    t, s = torch.randn(2, 3, 30), torch.randn(2, 3, 30)
    fwd, rev = D.distill_loss(s, t, 8, "forward")[0], D.distill_loss(s, t, 8, "reverse")[0]
    assert torch.equal(D.distill_loss(s, t, 8, "jsd", 0.0)[0], fwd)
    assert torch.equal(D.distill_loss(s, t, 8, "jsd", 1.0)[0], rev)
    eps = 1e-4
    assert torch.allclose(D.distill_loss(s, t, 8, "jsd", eps)[0] / eps, fwd, rtol=2e-2)
    assert torch.allclose(D.distill_loss(s, t, 8, "jsd", 1 - eps)[0] / eps, rev, rtol=2e-2)
    g_f = D.logit_grad_norms(s, t, 8, "forward")
    g_small = D.logit_grad_norms(s, t, 8, "jsd", eps) / eps
    assert torch.allclose(g_small, g_f, rtol=2e-2)
    mids = [D.distill_loss(s, t, 8, "jsd", b)[0] for b in (0.25, 0.5, 0.75)]
    assert all((m > 0).all() and (m < torch.maximum(fwd, rev)).all() for m in mids)


def test_near_one_hot_first_token_gradient():
    """Issue 22's mechanism: student max p = 0.9999 on one id, teacher 0.99 on another. Forward's
    logit gradient is q − p (norm ≈ 1.4); reverse's is O(ε log 1/ε): orders of magnitude smaller. JSD(β)
    for 0 < β < 1 has reverse's scale there (its ∂/∂q is logarithmic too); a temperature τ = 2 restores it."""
    r = D.near_one_hot_grad_norms(max_p=0.9999, teacher_p=0.99, vocab=700, k=16, betas=(0.1, 0.5, 0.9),
                                  temperatures=(2.0,))
    assert 1.3 < r["forward"] < 1.5
    assert r["reverse"] < 1e-2 and r["forward"] / r["reverse"] > 100
    for b in (0.1, 0.5, 0.9):
        assert r[f"jsd(β={b:g})"] < 1e-2
    assert r["reverse (τ=2)"] > 0.1 and r["forward (τ=2)"] > 0.1
    assert r["v1 forward"] > 1.0 and r["v1 reverse"] < 1e-3  # the recorded runs' losses: the same gap
    # the gap closes as the student de-saturates
    soft = D.near_one_hot_grad_norms(max_p=0.6, teacher_p=0.99, vocab=700, k=16, betas=(), temperatures=())
    assert soft["reverse"] > 0.1


@pytest.mark.parametrize("loss, beta, tau, match", [
    ("jsd", None, 1.0, "needs beta"), ("jsd", 1.5, 1.0, "needs beta"), ("forward", 0.5, 1.0, "takes none"),
    ("reverse", None, 0.0, "temperature"), ("kl", None, 1.0, "unknown loss")])
def test_loss_settings_refused(loss, beta, tau, match):
    with pytest.raises(ValueError, match=match):
        D.check_loss(loss, beta, tau)


def test_topk_kl_is_the_kl_on_the_shared_atoms():
    torch.manual_seed(3)
    t, s = torch.randn(2, 4, 40), torch.randn(2, 4, 40)
    for loss in ("forward", "reverse"):
        assert torch.equal(topk_kl(s, t, 8, loss)[0], D.distill_loss(s, t, 8, loss)[0])
    with pytest.raises(ValueError, match="unknown loss"):
        topk_kl(s, t, 8, "jsd")


@pytest.mark.parametrize("loss, beta, tau, lam", [("reverse", None, 1.0, 0.0), ("jsd", 0.5, 2.0, 1.0)])
def test_two_step_distillation_logs_gradient_norms(tiny, tmp_path, loss, beta, tau, lam):
    torch.set_num_threads(1)
    cfg = DistillConfig(model=str(tiny), out=str(tmp_path / "head"), loss=loss, beta=beta, temperature=tau,
                        student_sample_fraction=lam, top_k=8, lora_rank=2, lora_alpha=4, steps=2, batch=2,
                        max_new_tokens=6, save_every=2, seed=0)
    students = ["user: what is two plus two?\nassistant:", "user: name a colour.\nassistant:"]
    teachers = ["system: be warm.\n" + p for p in students]
    train(cfg, students, teachers, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "head" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["grad_norm"] is not None and r["grad_norm"] >= 0 and math.isfinite(r["grad_norm"])
        assert r["first_token_grad_norm"] >= 0 and 0 < r["first_token_max_p"] <= 1
        assert 0 < r["topk_mass"] <= 1 + 1e-6 and 0 < r["student_mass"] <= 1 + 1e-6
        assert r["on_policy"] is (lam == 1.0)
    assert any(r["grad_norm"] > 0 for r in rows)
    settings = json.loads((tmp_path / "head" / "manifest.json").read_text())["settings"]
    assert settings == manifest_settings(cfg)
    assert (settings["loss"], settings["beta"], settings["temperature"], settings["student_sample_fraction"]) == \
        (loss, beta, tau, lam)
    assert settings["parameterisation"] == D.PARAMETERISATION


def test_distill_config_refused_before_writing(tmp_path):
    cfg = DistillConfig(model="nowhere", out=str(tmp_path / "head"), loss="jsd", beta=None)
    with pytest.raises(ValueError, match="needs beta"):
        train(cfg, ["a"], ["b"], progress=False)
    cfg = DistillConfig(model="nowhere", out=str(tmp_path / "head"), student_sample_fraction=1.5)
    with pytest.raises(ValueError, match="student_sample_fraction"):
        train(cfg, ["a"], ["b"], progress=False)
    assert not (tmp_path / "head").exists()
