"""Learned heads: deterministic training, separable labels learned, resumable, saved with their provenance; ROC/AUC
against brute force; the SPRINTER verifier's reproduction."""

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from speculab.backends.heads import (  # noqa: E402
    HeadConfig,
    TrainedHead,
    auc,
    load_head,
    make_head,
    roc_curve,
    save_head,
    train_head,
)
from speculab.backends.head_data import FEATURES, SOURCES  # noqa: E402
from conftest import claims_of  # noqa: E402


def _data(n=600, d=6, seed=0, separable=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    w = rng.normal(size=d)
    y = (X @ w > 0).astype(float) if separable else rng.random(n).round()
    return X, y


def test_auc_and_roc_match_brute_force_with_ties():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 5, 200).astype(float)  # many ties
    y = (rng.random(200) < 0.4).astype(float)
    pos, neg = s[y == 1], s[y == 0]
    brute = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert auc(s, y) == pytest.approx(brute, abs=1e-12)
    fpr, tpr, thr = roc_curve(s, y)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    for f, t, c in zip(fpr[1:], tpr[1:], thr[1:]):  # each point is the rule "score >= threshold"
        assert t == pytest.approx(np.mean(pos >= c)) and f == pytest.approx(np.mean(neg >= c))
    assert np.trapezoid(tpr, fpr) == pytest.approx(brute, abs=1e-12)  # ties: the diagonal step is the half


@pytest.mark.parametrize(
    "bad, match",
    [
        (([0.1, 0.2], [1, 2]), "labels must be 0 or 1"),
        (([0.1, np.nan], [0, 1]), "NaN"),
        (([0.1, 0.2], [1, 1]), "both classes"),
        (([0.1], [0, 1]), "one length"),
    ],
)
def test_roc_refuses_bad_inputs(bad, match):
    with pytest.raises(ValueError, match=match):
        auc(*bad)


def test_training_is_deterministic_and_learns_separable_labels():
    X, y = _data()
    config = HeadConfig(d_in=X.shape[1], lr=5e-2, epochs=60, patience=60, seed=3)
    a, b = train_head(X, y, config=config), train_head(X, y, config=config)
    for (k, va), (_, vb) in zip(a.head.state_dict().items(), b.head.state_dict().items()):
        assert torch.equal(va, vb), k
    assert a.metrics["val_auc"] > 0.99  # linearly separable: the linear head finds the separation
    other = train_head(X, y, config=HeadConfig(d_in=X.shape[1], lr=5e-2, epochs=60, patience=60, seed=4))
    assert not torch.equal(other.head.out.weight, a.head.out.weight)  # the seed matters
    noise_X, noise_y = _data(separable=False)
    noise = train_head(noise_X, noise_y, config=HeadConfig(d_in=6, lr=5e-2, epochs=60, patience=5))
    assert noise.metrics["val_auc"] < 0.65 and noise.metrics["stopped_early"]  # nothing to learn: stops early


def test_resnet_head_with_soft_labels_and_weights():
    X, y = _data(seed=2)
    soft = np.clip(y * 0.8 + 0.1, 0, 1)
    config = HeadConfig(kind="resnet", depth=2, d_in=6, lr=1e-2, epochs=40, patience=40)
    trained = train_head(X, soft, np.where(y == 0, 6.0, 1.0), config=config)
    assert len(trained.head.blocks) == 2  # D residual blocks + the output layer: D + 1 layers
    p = trained(torch.as_tensor(X)).numpy()
    assert auc(p, y) > 0.97 and np.all((p > 0) & (p < 1))


@pytest.mark.slow
def test_an_interrupted_training_resumes_to_the_same_weights(tmp_path):
    """A real process killed mid-training (SIGKILL after its third epoch's checkpoint), then resumed (with this
    process's torch thread count: another count changes the weights' last bits, see the module's docstring)."""
    X, y = _data(seed=5)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    config = dict(d_in=6, lr=1e-2, epochs=12, patience=12, seed=7)
    ckpt = tmp_path / "ckpt.pt"
    script = f"""
import os, signal, sys, numpy as np, torch
import speculab.backends.heads as H
torch.set_num_threads({torch.get_num_threads()})
X, y = np.load(r"{tmp_path}/X.npy"), np.load(r"{tmp_path}/y.npy")
save = H._atomic_save
def save_then_die(obj, path):
    save(obj, path)
    if obj["state"]["epoch"] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
H._atomic_save = save_then_die
H.train_head(X, y, config=H.HeadConfig(**{config!r}), checkpoint=r"{ckpt}")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr  # killed by the signal, not finished
    assert torch.load(ckpt, weights_only=False)["state"]["epoch"] == 3
    resumed = train_head(X, y, config=HeadConfig(**config), checkpoint=ckpt, resume=True)
    whole = train_head(X, y, config=HeadConfig(**config))
    assert resumed.metrics["history"] == whole.metrics["history"]
    for (k, va), (_, vb) in zip(resumed.head.state_dict().items(), whole.head.state_dict().items()):
        assert torch.equal(va, vb), k
    with pytest.raises(ValueError, match="another configuration"):
        train_head(X, y, config=HeadConfig(**{**config, "lr": 0.5}), checkpoint=ckpt, resume=True)
    with pytest.raises(ValueError, match="another configuration or data set"):  # same size, other labels
        train_head(X, 1 - y, config=HeadConfig(**config), checkpoint=ckpt, resume=True)
    with pytest.raises(ValueError, match="existing checkpoint"):
        train_head(X, y, config=HeadConfig(**config), checkpoint=tmp_path / "none.pt", resume=True)


@pytest.mark.slow
def test_zero_weight_examples_are_left_out_and_never_make_a_nan():
    """A batch whose examples all weigh 0 adds nothing (it used to divide 0 by 0); the examples weighing 0 do not
    change the head: training with them is training without them, up to the batches they shuffle into."""
    X, y = _data(n=200, seed=8)
    w = np.ones(200)
    w[::3] = 0.0
    config = HeadConfig(d_in=6, lr=5e-2, epochs=30, patience=30, batch_size=1)
    trained = train_head(X, y, w, config=config)
    assert all(np.isfinite(h["train_loss"]) and np.isfinite(h["val_loss"]) for h in trained.metrics["history"])
    assert trained.metrics["val_auc"] > 0.95
    wrong = y.copy()
    wrong[::3] = 1 - wrong[::3]  # flipped labels where the weight is 0: nothing changes
    again = train_head(X, wrong, w, config=config)
    assert torch.equal(again.head.out.weight, trained.head.out.weight)
    with pytest.raises(ValueError, match="each have some weight"):
        train_head(
            X,
            y,
            np.r_[np.zeros(100), np.ones(100)],
            config=HeadConfig(d_in=6, val_fraction=0.5, seed=0),
            groups=np.r_[np.zeros(100), np.ones(100)],
        )


def test_groups_keep_correlated_examples_on_one_side_of_the_split():
    X, y = _data(n=300, seed=9)
    groups = np.repeat(np.arange(30), 10)
    trained = train_head(X, y, config=HeadConfig(d_in=6, epochs=3, patience=3, val_fraction=0.2), groups=groups)
    assert trained.metrics["n_val"] == 60  # 6 of 30 groups, 10 examples each
    with pytest.raises(ValueError, match="two distinct groups"):
        train_head(X, y, config=HeadConfig(d_in=6), groups=np.zeros(300))
    with pytest.raises(ValueError, match="one per example"):
        train_head(X, y, config=HeadConfig(d_in=6), groups=np.zeros(3))


def test_save_and_load_keep_weights_config_and_metrics(tmp_path):
    X, y = _data(seed=6)
    trained = train_head(X, y, config=HeadConfig(kind="resnet", depth=1, d_in=6, epochs=5, patience=5))
    path = save_head(trained, tmp_path / "head.safetensors")
    back = load_head(path)
    assert back.config == trained.config and back.metrics == json.loads(json.dumps(trained.metrics))
    h = torch.as_tensor(X[:10])
    assert torch.equal(back(h), trained(h))
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a safetensors file"):
        load_head(tmp_path / "junk.safetensors")
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a speculab head"):
        load_head(tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="no head file"):
        load_head(tmp_path / "missing.safetensors")
    save_file({"w": torch.zeros(2)}, str(tmp_path / "partial.safetensors"), metadata={"format": "speculab-head/1"})
    with pytest.raises(ValueError, match="do not fit together"):
        load_head(tmp_path / "partial.safetensors")
    meta = {"format": "speculab-head/1", "config": json.dumps({"d_in": 6}), "metrics": "{}"}
    save_file({"w": torch.zeros(2)}, str(tmp_path / "wrong.safetensors"), metadata=meta)
    with pytest.raises(ValueError, match="do not fit together"):  # the weights are not a head's
        load_head(tmp_path / "wrong.safetensors")
    with pytest.raises(ValueError, match="6 features"):
        back(torch.zeros(3, 5))


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(kind="mlp"), "kind must be"),
        (dict(d_in=0), "d_in must"),
        (dict(depth=2), "no residual blocks"),
        (dict(lr=float("nan")), "lr must"),
        (dict(lr=True), "lr must"),
        (dict(val_fraction=1.0), "val_fraction"),
        (dict(epochs=True), "epochs"),
        (dict(d_in=2.0), "d_in must"),
    ],
)
def test_head_config_refuses_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        HeadConfig(**{"d_in": 4, **bad})
    assert HeadConfig(d_in=np.int64(4), lr=np.float32(0.1)).d_in == 4  # numpy scalars are numbers too


def test_training_refuses_bad_data():
    X, y = _data(n=20)
    config = HeadConfig(d_in=6)
    for args, match in (
        ((X, y[:-1]), "one per example"),
        ((X, y + 1), r"probabilities in \[0, 1\]"),
        ((np.where(np.eye(20, 6) > 0, np.nan, X), y), "NaN"),
        ((X[:, :5], y), "d_in = 6"),
    ):
        with pytest.raises(ValueError, match=match):
            train_head(*args, config=config)
    with pytest.raises(ValueError, match="not all 0"):
        train_head(X, y, np.zeros(20), config=config)
    with pytest.raises(ValueError, match="numeric arrays"):
        train_head(X, np.array(["yes"] * 20), config=config)
    with pytest.raises(ValueError, match="config must be a HeadConfig"):
        train_head(X, y, config={"d_in": 6})
    with pytest.raises(ValueError, match="head must be a torch module"):
        TrainedHead(np.zeros(6), config)
    with pytest.raises(ValueError, match="config must be a HeadConfig"):
        TrainedHead(make_head(config), {"d_in": 6})


@pytest.mark.slow
def test_repro_sprinter_roc(tmp_path):
    from speculab.repro import sprinter_roc

    result = sprinter_roc.run(key=0, n_runs=60, out_dir=tmp_path)
    saved = json.loads((tmp_path / "sprinter_roc.json").read_text())
    assert saved["examples"] == 60 * 16 and set(saved["source_shares"]) == set(SOURCES)
    assert len(result["verifiers"]) == len(sprinter_roc.LAMBDAS) * len(FEATURES)
    for name, r in result["verifiers"].items():
        assert 0 <= r["auc"] <= 1 and 0 <= r["eta_fp"] <= 1 and 0 <= r["eta_tp"] <= 1
        head = load_head(tmp_path / f"sprinter_verifier_{name}.safetensors")
        assert head.config.kind == "linear" and head.metrics["epochs"] == r["epochs"]
    shares = [result["verifiers"][f"lam{lam}_token"]["acceptable_share"] for lam in sprinter_roc.LAMBDAS]
    assert shares == sorted(shares)  # a larger λ labels more tokens acceptable
    assert (tmp_path / "sprinter_roc.png").stat().st_size > 0 and "AUC" in sprinter_roc.summary(result)
    rows = {row["quantity"]: row for row in claims_of(sprinter_roc, result)}
    v = result["verifiers"]["lam1.2_previous"]  # [SPR] Table 5's λ, [SPR]'s input
    assert rows["verifier AUC on held-out prefixes, λ = 1.2"]["measured"].startswith(f"previous {v['auc']:.3f}, token ")
    assert (
        rows["η_TP, η_FP at τ = 0.5, λ = 1.2, [SPR]'s input (previous token)"]["measured"]
        == f"η_TP {v['eta_tp']:.3f}, η_FP {v['eta_fp']:.3f}"
    )


def test_a_constant_head_scores_its_constant_and_refuses_a_score_outside_the_open_interval():
    from speculab.backends.heads import constant_head

    head = constant_head(5, 0.3)
    scores = head(torch.randn(7, 5, generator=torch.Generator().manual_seed(0)) * 100)
    np.testing.assert_allclose(scores.numpy(), 0.3, rtol=1e-6)
    for bad in (0.0, 1.0, True, float("nan"), "0.3"):
        with pytest.raises(ValueError, match=r"score must be a number in \(0, 1\)"):
            constant_head(5, bad)


def test_the_resnet_head_is_sdpp_s_architecture_written_out():
    """[SDpp] §4: ``D`` residual blocks ``h + SiLU(W h + b)``, then a linear layer and the sigmoid — computed here
    by hand from the head's own weights (SiLU(z) = z · σ(z))."""
    config = HeadConfig(d_in=4, kind="resnet", depth=2)
    head = make_head(config, torch.Generator().manual_seed(3))
    h = torch.randn(5, 4, generator=torch.Generator().manual_seed(4))
    x = h.clone()
    for block in head.blocks:
        z = x @ block.linear.weight.T + block.linear.bias
        x = x + z * torch.sigmoid(z)
    logit = (x @ head.out.weight.T + head.out.bias)[:, 0]
    torch.testing.assert_close(head(h).reshape(-1), logit)
    torch.testing.assert_close(TrainedHead(head, config)(h).reshape(-1), torch.sigmoid(logit))
