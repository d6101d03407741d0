"""timm models by name: checked before any cluster starts, built with the data's classes and size.

Checking a name needs timm's registry, and importing timm imports torch: seconds. `plan` should
answer at once, so the registry's names are cached once per installed timm version (a JSON list
in the smlaunch cache) and later checks read that list without importing either.

A model may start from a weights file (`model.pretrained`, fine-tuning): `load_pretrained` reads it
with timm's own loader and re-sizes the classifier to the run's classes. Only a file is loaded,
never a hub download: a run must not depend on a model hub being reachable from its hosts.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass

from smlaunch.errors import ConfigError


def timm_model_names() -> frozenset[str]:
    """Every architecture timm can build, from the cache for this timm version if it has it."""
    from importlib.metadata import PackageNotFoundError, version

    from smlaunch.pipelines.builtin.cache import cache_root

    try:
        cache = cache_root() / f"timm-{version('timm')}-models.json"
    except PackageNotFoundError:
        cache = None
    if cache is not None:
        try:
            return frozenset(json.loads(cache.read_text()))
        except (OSError, ValueError):
            pass
    import timm

    names = sorted(timm.list_models())
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_name(f".{cache.name}.{os.getpid()}")
            partial.write_text(json.dumps(names))
            partial.replace(cache)  # readers never see half a list
        except OSError:
            pass
    return frozenset(names)


def check_model_name(name: str) -> None:
    """`ConfigError` naming close matches when timm has no model `name`. A pretrained tag
    (`resnet50.a1_in1k`) names the same architecture as the part before the dot."""
    names = timm_model_names()
    if name.split(".", 1)[0] in names:
        return
    close = difflib.get_close_matches(name, sorted(names), n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see timm.list_models()"
    raise ConfigError(f"model.name: timm has no model {name!r}{hint}")


def create_model(name: str, num_classes: int, image_size: int, in_chans: int = 3):
    """A randomly initialised timm model; `img_size` is passed to models that take it (ViTs)."""
    import timm

    try:
        return timm.create_model(
            name, pretrained=False, num_classes=num_classes, in_chans=in_chans, img_size=image_size
        )
    except TypeError:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans)


def build_model(spec):
    """The run's model on this rank: the user's `model.factory(**model.params)`, or timm's `model.name`."""
    if spec.model_factory:
        return create_from_factory(spec.model_factory, spec.model_params)
    return create_model(spec.model, spec.num_classes, spec.image_size)


def create_from_factory(path: str, params: dict):
    """`path(**params)`, which must return a `torch.nn.Module`; a `ConfigError` in one line otherwise."""
    import torch

    from smlaunch.user_code import resolve

    model = resolve(path, "model.factory")(**params)
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"model.factory: {path} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def factory_problems(path: str, params: dict) -> list[str]:
    """Whether `model.factory` imports and `params` bind to its signature: `plan`'s check, which
    builds no model."""
    from smlaunch.user_code import check

    problem = check(path, "model.factory", params=params)
    return [problem] if problem else []


@dataclass(frozen=True)
class Pretrained:
    """What `load_pretrained` did, for the console line."""

    source: str
    loaded: int
    """Tensors taken from the file."""
    reinitialised: tuple[str, ...]
    """Classifier modules kept at their fresh initialisation (the file's had another class count)."""
    num_classes: int

    def describe(self) -> str:
        if self.reinitialised:
            return (
                f"fine-tuning from {self.source}: classifier {', '.join(self.reinitialised)} re-initialised "
                f"for {self.num_classes} classes"
            )
        if not self.num_classes:  # a factory's model: no classifier known, every tensor checked
            return f"fine-tuning from {self.source}: all {self.loaded} tensors loaded"
        return f"fine-tuning from {self.source}: all weights loaded, classifier included ({self.num_classes} classes)"


def load_pretrained(model, source: str) -> Pretrained:
    """Load the weights file `source` (a local path, or `s3://bucket/key`) into `model` for fine-tuning.

    timm reads the file (`timm.models.load_state_dict`: safetensors by suffix, else `torch.load`
    with weights_only; the `state_dict_ema` / `model_ema` / `state_dict` / `model` entry of a
    training checkpoint; `module.` and `_orig_mod.` prefixes removed), and the model's own
    checkpoint filter runs on it as timm runs it on its hub weights (a ViT's position embedding is
    resampled to this image size). Tensors of the classifier whose shape differs (another class
    count) are dropped and the classifier keeps its fresh initialisation. Anything else missing,
    extra or of another shape means weights of another architecture: `ConfigError` naming the
    file, rather than a model trained from a half-loaded backbone."""
    if source.startswith("s3://"):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="smlaunch-weights-") as tmp:
            return _load_file(model, _download(source, tmp), source)
    path = os.path.expanduser(source)
    if not os.path.isfile(path):
        raise ConfigError(
            f"model.pretrained: {source} " + ("is not a file" if os.path.exists(path) else "does not exist")
        )
    return _load_file(model, path, source)


def _download(uri: str, directory: str) -> str:
    """The object `uri` in `directory` under its own name (timm tells safetensors by the suffix)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from smlaunch.pipelines.sources.objects import s3_client

    bucket, _, key = uri.removeprefix("s3://").partition("/")  # an object's URI: `ModelConfig` refused others at load
    local = os.path.join(directory, os.path.basename(key))
    # The endpoint is passed, not left to the client: `s3_client` caches one client per argument.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    try:
        s3_client(endpoint).download_file(bucket, key, local)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        reason = "no such object" if code in ("404", "NoSuchKey", "NoSuchBucket") else f"{code or exc}"
        raise ConfigError(f"model.pretrained: {uri}: {reason}") from None
    except BotoCoreError as exc:
        raise ConfigError(f"model.pretrained: {uri}: {exc}") from None
    return local


def _load_file(model, path: str, source: str) -> Pretrained:
    import pickle

    from timm.models import load_state_dict

    if os.path.getsize(path) == 0:
        raise ConfigError(f"model.pretrained: {source} is empty")
    try:
        state = load_state_dict(path, use_ema=True, device="cpu", weights_only=True)
    except Exception as exc:  # safetensors, zip and pickle readers raise many types for a bad file
        objects = _pickled_objects(path)
        if objects:  # timm refuses (and never falls back to) unpickling anything but tensors
            raise ConfigError(
                f"model.pretrained: {source} holds more than tensors ({', '.join(objects[:3])}: a "
                "pickled object or a training checkpoint, such as an smlaunch state.pt); give a "
                "state dict: .safetensors, or a .pth of tensors such as a run's model/model.pt"
            ) from None
        # Bytes that are no pickle at all fail as an unpickling error or a KeyError of an unknown opcode.
        garbage = isinstance(exc, (pickle.UnpicklingError, KeyError)) or isinstance(
            exc.__cause__, pickle.UnpicklingError
        )
        detail = "its bytes are neither" if garbage else f"{type(exc).__name__}: {_first_line(exc)}"
        raise ConfigError(
            f"model.pretrained: {source} is not a weights file timm can read (.safetensors, or a "
            f"torch.save file: .pth, .pt, .bin): {detail}"
        ) from None
    state = _model_filter(model, state, source)
    own = model.state_dict()
    heads = classifier_names(model)

    def in_head(key: str) -> bool:
        return any(key == h or key.startswith(h + ".") for h in heads)

    shaped = {k for k, v in state.items() if k in own and getattr(v, "shape", None) != own[k].shape}
    extra = [k for k in state if k not in own and not in_head(k)]
    missing = [k for k in own if k not in state and not in_head(k)]
    wrong = [k for k in sorted(shaped) if not in_head(k)]
    if extra or missing or wrong:
        raise ConfigError(
            f"model.pretrained: {source} does not fit {_arch(model)} (weights of another "
            f"architecture?): {_mismatch(state, own, missing, wrong, extra)}"
        )
    state = {k: v for k, v in state.items() if k in own and k not in shaped}
    result = model.load_state_dict(state, strict=False)
    reinitialised = tuple(h for h in heads if any(k == h or k.startswith(h + ".") for k in result.missing_keys))
    return Pretrained(source, len(state), reinitialised, getattr(model, "num_classes", 0))


def _model_filter(model, state: dict, source: str) -> dict:
    """The state after the `checkpoint_filter_fn` of the model's timm module, where it has one:
    the conversion timm applies to its own pretrained weights (a no-op on timm-format tensors but
    for resampling a ViT's position embedding or patch projection to this model's size)."""
    import sys

    module = sys.modules.get(type(model).__module__)
    fn = getattr(module, "checkpoint_filter_fn", None)
    if fn is None or not (getattr(module, "__name__", "").startswith("timm.")):
        return state
    try:
        return fn(state, model)
    except Exception as exc:  # a filter meets weights of another architecture
        raise ConfigError(
            f"model.pretrained: {source} does not fit {_arch(model)} (weights of another "
            f"architecture?): timm's conversion failed ({type(exc).__name__}: "
            f"{_first_line(exc)})"
        ) from None


def _pickled_objects(path: str) -> list[str]:
    """The classes a `torch.save` file pickles that a weights-only load refuses (none: not such a file)."""
    import torch

    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # not a torch.save zip, or a torch without this helper
        return []


def classifier_names(model) -> tuple[str, ...]:
    """The modules holding the classifier: timm's `pretrained_cfg['classifier']` (one name, or
    several for distilled models), and whatever `get_classifier()` returns."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    named = cfg.get("classifier") or ()
    names = [named] if isinstance(named, str) else list(named)
    if hasattr(model, "get_classifier"):
        head = model.get_classifier()
        names += [name for name, module in model.named_modules() if module is head and name]
    return tuple(dict.fromkeys(names))


def _mismatch(state: dict, own: dict, missing: list, wrong: list, extra: list) -> str:
    parts = []
    if missing:
        parts.append(f"{len(missing)} of the model's tensors not in the file (e.g. {missing[0]})")
    if wrong:
        k = wrong[0]
        parts.append(
            f"{len(wrong)} of another shape (e.g. {k}: {_shape(state[k])} in the file, {_shape(own[k])} in the model)"
        )
    if extra:
        parts.append(f"{len(extra)} not in the model (e.g. {extra[0]})")
    return "; ".join(parts)


def _shape(tensor) -> str:
    shape = getattr(tensor, "shape", None)
    return "x".join(map(str, shape)) if shape is not None else type(tensor).__name__


def _arch(model) -> str:
    return (getattr(model, "pretrained_cfg", None) or {}).get("architecture") or type(model).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:200] if text else "") or "no message"
