"""The recipe around a step (`trainers.recipe`, `trainers.optim`, `trainers.callbacks`), on real
tiny models on the CPU: the step order, what a checkpoint must hold for a resume to be exact, an
fp16 overflow that skips its step, clipping, a user's factories and what is refused of them, a model
that fails to compile, and the precision `auto` picks per GPU.

An interrupted run resumes to the very same weights as an uninterrupted one: two DDP ranks in a
whole job cannot show that bit for bit (which rows meet in a step depends on Ray Data's timing),
so it is shown here on the loop's own save and restore (`checkpoint_fields`, `TrainState`,
`restore`); the whole job (tests/launcher/test_byo_jobs.py) shows the recipe's state surviving a
real restart.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from smlaunch.config.precision import capability_of, choose_precision
from smlaunch.config.recipe import FactoryConfig
from smlaunch.config.schema import TrainerConfig
from smlaunch.errors import UserError
from smlaunch.trainers.callbacks import Callbacks, RunView
from smlaunch.trainers.checkpoints import TrainState, load_train_state, save_train_state
from smlaunch.trainers.recipe import CompiledForward, Recipe, checkpoint_fields, restore

CPU = torch.device("cpu")
PROJECT = "support.byo_project.regression"


def _spec(optimizer=None, schedule=None, total_steps=20, **trainer):
    return SimpleNamespace(
        trainer=TrainerConfig(steps=total_steps, learning_rate=0.05, weight_decay=0.0, **trainer),
        learning_rate=0.05,
        total_steps=total_steps,
        optimizer=FactoryConfig(factory=optimizer[0], params=optimizer[1]) if optimizer else None,
        schedule=FactoryConfig(factory=schedule[0], params=schedule[1]) if schedule else None,
    )


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def _batch(step: int):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=g)
    return x, x.sum(1, keepdim=True)


class _Run:
    """What `RunView` reads of the loop's run."""

    def __init__(self, recipe, rank=0):
        self.recipe, self.rank, self.world, self.step, self.epochs_done, self.stop_request = recipe, rank, 1, 0, 0, None


def _train(model, recipe, callbacks, run, steps):
    for _ in range(steps):
        x, y = _batch(run.step)
        recipe.backward(torch.nn.functional.mse_loss(model(x), y))
        outcome = recipe.step()
        run.step += 1
        callbacks.fire("on_step_end", RunView(run), outcome)
        if run.step % 4 == 0:  # a "validation": the train loss of a fixed batch, as every rank would see it
            with torch.no_grad():
                value = torch.nn.functional.mse_loss(recipe.validated(_batch(999)[0]), _batch(999)[1]).item()
            callbacks.fire("on_validation_end", RunView(run), {"step": run.step, "epoch": 1, "mse": value})


RECIPE = {
    "optimizer": (f"{PROJECT}:grouped_adamw", {"lr": 0.05, "head_lr": 0.1}),
    "schedule": (f"{PROJECT}:cliff", {"drop_at": 6, "factor": 0.1}),
    "clip_grad_norm": 0.5,
    "ema": {"decay": 0.8},
    "keep_best": {"metric": "mse", "mode": "min"},
    "early_stop": {"metric": "mse", "mode": "min", "patience": 5},
}


def _fresh(**recipe):
    model = _model()
    spec = _spec(**recipe)
    built = Recipe(model, spec, CPU, "fp32")
    return model, built, Callbacks(spec.trainer), _Run(built)


def test_a_run_interrupted_at_a_checkpoint_resumes_to_the_same_weights_as_one_that_never_stopped(tmp_path):
    model, recipe, callbacks, run = _fresh(**RECIPE)
    _train(model, recipe, callbacks, run, 12)

    model2, recipe2, callbacks2, run2 = _fresh(**RECIPE)
    _train(model2, recipe2, callbacks2, run2, 7)  # interrupted after step 7, its checkpoint written as the loop does
    fields = checkpoint_fields(recipe2, callbacks2)
    save_train_state(
        str(tmp_path),
        TrainState(model=model2.state_dict(), step=7, epochs_done=0, world_size=1, config_sha256="x", **fields),
    )
    state = load_train_state(tmp_path)
    model3, recipe3, callbacks3, run3 = _fresh(**RECIPE)
    model3.load_state_dict(state.model)
    restore(recipe3, callbacks3, state)
    run3.step = state.step
    _train(model3, recipe3, callbacks3, run3, 5)

    for a, b in zip(model.state_dict().values(), model3.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(recipe.ema.state_dict().values(), recipe3.ema.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the EMA and its n_averaged too
    assert recipe.optimizer.param_groups[1]["lr"] == recipe3.optimizer.param_groups[1]["lr"] == pytest.approx(0.01)
    x, y = _batch(0)
    recipe3.backward(torch.nn.functional.mse_loss(model3(x), y))
    assert recipe3.step().group_lrs == {"body": pytest.approx(0.005), "head": pytest.approx(0.01)}  # named groups
    assert callbacks.state_dict()["EarlyStop"] == callbacks3.state_dict()["EarlyStop"]
    best, best3 = callbacks.keep_best, callbacks3.keep_best
    assert (best.step, best.value) == (best3.step, best3.value)
    assert all(torch.equal(best.weights[k], best3.weights[k]) for k in best.weights)
    assert set(best.weights) == set(model.state_dict())  # plain keys: the bare module's, not the EMA wrapper's


def test_the_step_clips_by_the_global_norm_and_reports_the_norm_before_clipping_and_the_rate_it_used():
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    spec = _spec(optimizer=(f"{__name__}:plain_sgd", {"lr": 1.0}), clip_grad_norm=0.5)
    recipe = Recipe(model, spec, CPU, "fp32")
    x = torch.tensor([[3.0, 4.0, 0.0]])
    recipe.backward((model(x) - 1).pow(2).sum() / 2)  # gradient -x: norm 5
    outcome = recipe.step()
    assert outcome.stepped and outcome.grad_norm.item() == pytest.approx(5.0)
    assert outcome.lr == pytest.approx(1.0 * 1 / 2)  # the warmup's first factor (2 steps of warmup over 20)
    assert model.weight.detach().norm().item() == pytest.approx(0.5 * outcome.lr, rel=1e-4)  # clipped to 0.5
    assert all(p.grad is None for p in model.parameters())  # zeroed for the next step


def plain_sgd(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr)


def test_an_fp16_overflow_skips_its_step_and_neither_the_schedule_nor_the_ema_moves():
    model = _model()
    spec = _spec(ema={"decay": 0.5})
    recipe = Recipe(model, spec, CPU, "fp16")  # the GradScaler on the CPU: the same skip logic as on a GPU
    assert recipe.scaler.is_enabled()
    before = [p.detach().clone() for p in model.parameters()]
    x, y = _batch(0)
    recipe.backward(torch.nn.functional.mse_loss(model(x), y) * float("inf"))
    outcome = recipe.step()
    assert not outcome.stepped and recipe.skipped == 1 and not torch.isfinite(outcome.grad_norm)
    assert recipe.schedule.last_epoch == 0 and int(recipe.ema.n_averaged) == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    recipe.backward(torch.nn.functional.mse_loss(model(x), y))
    outcome = recipe.step()
    assert outcome.stepped and recipe.schedule.last_epoch == 1 and int(recipe.ema.n_averaged) == 1
    assert recipe.state_dict()["scaler"]["scale"] < 2.0**16 and recipe.state_dict()["skipped"] == 1


def leaves_the_head_out(model):
    return torch.optim.SGD(model[0].parameters(), lr=0.1)


def holds_a_stranger(model):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1)), *model.parameters()], lr=0.1)


def not_an_optimizer(model):
    return list(model.parameters())


def not_a_schedule(optimizer, total_steps):
    return lambda step: 1.0


@pytest.mark.parametrize(
    ("optimizer", "schedule", "message"),
    [
        ("leaves_the_head_out", None, "trainable parameters 1.weight, 1.bias, 3.weight and 1 more in no group"),
        ("holds_a_stranger", None, "group 0 holds a tensor that is not a parameter of the model"),
        ("not_an_optimizer", None, "returned list; return a torch.optim.Optimizer"),
        (None, "not_a_schedule", "returned function; return a torch.optim.lr_scheduler.LRScheduler"),
    ],
)
def test_a_factory_s_optimizer_or_schedule_that_would_train_wrongly_is_refused_in_one_line(
    optimizer, schedule, message
):
    spec = _spec(
        optimizer=(f"{__name__}:{optimizer}", {}) if optimizer else None,
        schedule=(f"{__name__}:{schedule}", {}) if schedule else None,
    )
    with pytest.raises(UserError) as caught:
        Recipe(_model(), spec, CPU, "fp32")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def _failing_backend(graph, example_inputs):
    raise RuntimeError("this backend compiles nothing")


def test_a_model_that_fails_to_compile_trains_eagerly_after_one_warning_and_one_that_compiles_keeps_its_keys():
    notes = []
    console = SimpleNamespace(put=lambda kind, **fields: notes.append((kind, fields["text"])))
    model = _model()
    keys = list(model.state_dict())
    compiled = CompiledForward(model, console, backend=_failing_backend)
    x, _ = _batch(0)
    out = compiled.call(lambda: model(x))
    assert out.shape == (16, 1) and "forward" not in vars(model)  # back to the class's own forward
    assert len(notes) == 1 and notes[0][0] == "warning"
    assert notes[0][1].startswith("trainer.compile: the model did not compile (") and "training eagerly" in notes[0][1]
    ok = _model()
    compiled = CompiledForward(ok, console, backend="eager")
    assert torch.allclose(compiled.call(lambda: ok(x)), _model()(x)) and len(notes) == 1
    assert list(ok.state_dict()) == keys  # no `_orig_mod.`: checkpoints and model.pt load into a bare model


@pytest.mark.parametrize(
    ("requested", "gpu", "chosen", "why"),
    [
        ("auto", "T4", "fp16", "auto: compute capability 7.5 < 8.0 has no fast bf16; fp16 with a GradScaler"),
        ("auto", "V100", "fp16", "auto: compute capability 7.0 < 8.0"),
        ("auto", "A10G", "bf16", "auto: compute capability 8.6 >= 8.0"),
        ("auto", "H100", "bf16", "auto: compute capability 9.0 >= 8.0"),
        ("auto", None, "fp32", "CPU train workers"),
        ("fp16", None, "fp32", "fp16 asked, but the train workers are CPUs (fp32 there)"),
        ("bf16", "T4", "bf16", "bf16 is emulated below 8.0, slow"),
        ("fp32", "H100", "fp32", "asked"),
    ],
)
def test_auto_precision_picks_bf16_from_compute_capability_8_fp16_below_and_fp32_on_cpu(requested, gpu, chosen, why):
    got, reason = choose_precision(requested, capability_of(gpu))
    assert got == chosen and why in reason


def test_keep_best_and_early_stop_decide_from_the_metric_and_name_the_metrics_there_are_when_it_is_missing():
    trainer = TrainerConfig(
        steps=10,
        keep_best={"metric": "auroc", "mode": "max"},
        early_stop={"metric": "auroc", "mode": "max", "patience": 2, "min_delta": 0.01},
    )
    callbacks = Callbacks(trainer)
    run = _Run(SimpleNamespace(validated=_model()))
    view = RunView(run)
    for step, value in [(1, 0.7), (2, 0.75), (3, 0.755), (4, 0.74)]:
        run.step = step
        callbacks.fire("on_validation_end", view, {"step": step, "epoch": 1, "auroc": value, "rows": 10})
    assert callbacks.keep_best.best() == {"step": 3, "metric": "auroc", "value": 0.755}
    kept = callbacks.keep_best.weights["0.weight"].clone()
    with torch.no_grad():
        run.recipe.validated[0].weight.add_(1.0)  # training goes on after the best validation
    assert torch.equal(callbacks.keep_best.weights["0.weight"], kept)  # a copy, not the live tensor
    assert run.stop_request == (
        "early stop at step 4: auroc has not improved by more than 0.01 in 2 validations; best auroc=0.75 at step 2"
    )
    # A rerun of the same config resumes a run that had stopped early: it ends at once, on this line.
    resumed = Callbacks(trainer)
    resumed.load_state_dict(callbacks.state_dict())
    assert resumed.stopped_early_line(4) == (
        "early stop: this run had stopped early at step 4 (best auroc=0.75 at step 2); nothing left to train"
    )
    assert Callbacks(trainer).stopped_early_line(4) is None
    with pytest.raises(UserError) as caught:
        Callbacks(trainer).fire("on_validation_end", view, {"step": 1, "epoch": 1, "loss": 0.3, "rows": 10})
    assert str(caught.value) == "trainer.keep_best.metric: validation gave no 'auroc'; it gave loss"
