"""Which number format trains: one rule for `plan` (from the train instance type's GPU model) and
for the ranks (from the GPUs they hold), so what the plan says is what runs.

`auto` picks bf16 autocast on compute capability 8.0 and above (A100, A10G, L4, L40S, H100), fp16
autocast with a GradScaler on 7.x (V100 7.0, T4 7.5: the cheapest SageMaker GPUs, whose bf16 is
emulated and slow although `torch.cuda.is_bf16_supported()` says True there), and fp32 on CPU
(`../shared/notes/recipe.md` section 2: NVIDIA's support matrix, the bf16 emulation branch).
"""

from __future__ import annotations

CAPABILITY = {
    "K80": (3, 7),
    "V100": (7, 0),
    "T4": (7, 5),
    "A100": (8, 0),
    "A10G": (8, 6),
    "L4": (8, 9),
    "L40S": (8, 9),
    "H100": (9, 0),
    "H200": (9, 0),
    "B200": (10, 0),
}
"""CUDA compute capability of the GPU models SageMaker's instance types carry (NVIDIA's CUDA GPUs
list; `config.instance_types` names the model per type)."""

BF16_FROM = (8, 0)


def choose_precision(requested: str, capability: tuple[int, int] | None) -> tuple[str, str]:
    """(`bf16` | `fp16` | `fp32`, why) for `requested` (`trainer.precision`) on a GPU of
    `capability` (the lowest over the ranks), or on CPU (None). An explicit choice the hardware
    cannot run falls back with the reason: fp16 or bf16 on CPU stand-ins trains in fp32 (the local
    simulation of a GPU job), bf16 below 8.0 is kept as asked (emulated: slow, not wrong)."""
    cc = f"compute capability {capability[0]}.{capability[1]}" if capability else ""
    if capability is None:
        if requested in ("fp16", "bf16"):
            return "fp32", f"{requested} asked, but the train workers are CPUs (fp32 there)"
        return "fp32", "CPU train workers" if requested == "auto" else "asked"
    if requested != "auto":
        slow = requested == "bf16" and capability < BF16_FROM
        return requested, f"asked ({cc}{': bf16 is emulated below 8.0, slow' if slow else ''})"
    if capability >= BF16_FROM:
        return "bf16", f"auto: {cc} >= 8.0"
    return "fp16", f"auto: {cc} < 8.0 has no fast bf16; fp16 with a GradScaler"


def capability_of(accelerator: str | None) -> tuple[int, int] | None:
    """The compute capability of a GPU model `config.instance_types` names; None for none or unknown."""
    return CAPABILITY.get(accelerator or "")
