"""Property-based tests of the config loader (issue 79, item 6): mutated configs, arbitrary YAML text
and bytes, and random `--set` overrides.

Every example either loads into a `LaunchConfig` or is refused with a `ConfigError` of one
non-empty line: a traceback of any other type (a YAML error leaking, pydantic's ValidationError, a
TypeError in a validator, a RecursionError) fails, as does an example that raises the process's
peak RSS by `MEMORY_BOUND`; a hang fails on the example's deadline. The mutations start from the
shipped configs and draw from the schema's own field names, op names and instance types, so they
reach the cross-field validators, not only the type checks. 4 x 750 examples, derandomized and
without an example database: the same cases on every run, about 20 s on two cores. `FOUND` keeps
what the fuzz found, each a case of its own.
"""

from __future__ import annotations

import copy
import resource
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from smlaunch.config import LaunchConfig, load_config
from smlaunch.config.op_specs import OP_NAMES
from smlaunch.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "configs").glob("*.yaml"))}
TINY_TEXT = (ROOT / "configs" / "tiny.yaml").read_text()
MEMORY_BOUND = 200 << 20
"""How far one load may raise the process's peak RSS: a config is KiB, an alias bomb would be GiB.
(tracemalloc would measure exactly, but makes the loads 4x slower.)"""

FUZZ = settings(
    max_examples=750,
    deadline=5000,  # ms: a hang, not a slow machine (an example takes a few ms)
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _field_names() -> list[str]:
    """Every field name of the schema, so mutations add keys that are valid somewhere."""
    names: set[str] = set()
    seen: set[type] = set()

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                return
            seen.add(annotation)
            for name, field in annotation.model_fields.items():
                names.add(name)
                walk(field.annotation)
        for arg in typing.get_args(annotation):
            walk(arg)

    walk(LaunchConfig)
    return sorted(names)


FIELDS = _field_names()
WORDS = [*FIELDS, *OP_NAMES] + (
    "ml.g5.xlarge ml.c5.xlarge ml.p4d.24xlarge ml.g7.xlarge builtin:digits/train builtin:digits builtin:synthetic "
    "s3://bucket/prefix/ file:///tmp/x train validation gpu cpu image label tfrecord recordio File Pipe FastFile "
    "ShardedByS3Key aws http://127.0.0.1:1 os.path:join package.module:Class min max RGB L auto bf16 fp16 sgd"
).split()
"""Values the schema gives meaning to: a mutation that uses one gets past the type check."""

keys = st.one_of(st.sampled_from(WORDS), st.text(max_size=12), st.integers(-3, 3), st.none(), st.booleans())
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 100),
    st.integers(),
    st.sampled_from([2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 10**300, -(10**300)]),
    st.floats(),
    st.sampled_from([0.0, -0.0, 1e-320, 1e308, 0.5, 1.0]),
    st.sampled_from(WORDS),
    st.text(max_size=24),
    st.text(alphabet="\n\r\t\x00\x85\u2028\u2029 \"'\\:{}[]&*!|>%@`#,", max_size=8),
    st.sampled_from(["", " ", "x" * 100_000, "é" * 2_000, "\U0001f600", "-", "~", "null", "yes", "0x1F", ".inf"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every node's path below the root (dict keys and list indices)."""
    out: list[tuple] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _nudged(value: Any) -> st.SearchStrategy:
    """A value of the same kind as `value`: it passes the type check and reaches the validators
    behind it (ranges, cross-field rules, lookups), where a random value rarely gets."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(-2, 5) | st.integers(-(2**64), 2**64) | st.just(value * 1000)
    if isinstance(value, float):
        return st.floats(-2, 2) | st.floats(allow_nan=False, allow_infinity=False) | st.just(-value)
    if isinstance(value, str):
        return st.sampled_from(WORDS) | st.just(value.upper()) | st.just(value + "x") | st.just(value[:-1])
    if isinstance(value, list):
        return st.permutations(value) | st.just(value[1:]) | st.just(value + value[:1]) | st.just([])
    return st.just({}) if isinstance(value, dict) else st.none()


@st.composite
def mutated_configs(draw) -> Any:
    """A shipped config with 1-4 mutations: a node nudged (a value of its own kind) or replaced (by a
    random value or another node of the config), deleted, given an unknown or misplaced key, or an
    op renamed."""
    tree = copy.deepcopy(CONFIGS[draw(st.sampled_from(sorted(CONFIGS)), label="base")])
    for _ in range(draw(st.integers(1, 4), label="mutations")):
        if not isinstance(tree, dict):
            break
        paths = _paths(tree)
        path = draw(st.sampled_from(paths), label="path") if paths else ()
        parent = _get(tree, path[:-1]) if path else None
        kind = draw(
            st.sampled_from(["nudge", "nudge", "replace", "replace", "swap", "delete", "add", "rename_op", "root"])
        )
        if kind == "nudge" and parent is not None:
            parent[path[-1]] = draw(_nudged(parent[path[-1]]), label="nudged")
        elif kind == "root" or parent is None:
            tree = draw(values, label="root") if kind == "root" and draw(st.booleans()) else tree
            if isinstance(tree, dict):
                tree[draw(keys, label="top key")] = draw(values, label="top value")
        elif kind == "replace":
            parent[path[-1]] = draw(values, label="value")
        elif kind == "swap":
            parent[path[-1]] = copy.deepcopy(_get(tree, draw(st.sampled_from(paths), label="other")))
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "add":
            node = _get(tree, path)
            if isinstance(node, dict):
                node[draw(keys, label="key")] = draw(values, label="value")
            elif isinstance(node, list):
                node.append(draw(values, label="item"))
        else:
            ops = tree.get("pipeline", {}).get("ops") if isinstance(tree.get("pipeline"), dict) else None
            if isinstance(ops, list) and ops and isinstance(ops[0], dict):
                op = ops[draw(st.integers(0, len(ops) - 1), label="op")]
                if isinstance(op, dict):
                    op["op"] = draw(st.sampled_from(OP_NAMES) | st.text(max_size=16), label="op name")
    return tree


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-config")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10  # KiB on Linux


def _check(path: Path, overrides: list[str]) -> LaunchConfig | None:
    """Load; a refusal must be one non-empty line, and the process's peak RSS may not grow by
    `MEMORY_BOUND`. Any other exception propagates and fails the example."""
    before = _peak_rss()
    try:
        cfg = load_config(path, overrides)
    except ConfigError as exc:
        message = str(exc)
        assert message and len(message.splitlines()) == 1 and "\n" not in message, repr(message)
        event("refused", message.partition(": ")[2].partition(":")[0][:40])
        cfg = None
    else:
        assert isinstance(cfg, LaunchConfig)
        event("accepted")
    grown = _peak_rss() - before
    assert grown < MEMORY_BOUND, f"the peak RSS grew by {grown >> 20} MiB"
    return cfg


@FUZZ
@given(tree=mutated_configs())
def test_mutated_configs_load_or_are_refused_in_one_line(workdir, tree):
    path = workdir / "mutated.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False, allow_unicode=True))
    _check(path, [])


# YAML's sharp edges: anchors and aliases (cyclic too), tags (core, unknown, Python's), merge keys,
# complex keys, directives, several documents, flow and block nesting, tabs, BOM, NUL.
FRAGMENTS = [
    "a: 1\n",
    "a: 1\na: 2\n",
    "&x ",
    "*x",
    "&x [*x]",
    "&x {k: *x}",
    "<<: *x\n",
    "<<: [*x, *x]\n",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!str ",
    "!!binary ",
    "!!timestamp ",
    "!!set ",
    "!!omap ",
    "!!pairs ",
    "!!python/object:os.system ",
    "!!python/name:os.system ",
    "!custom ",
    "!<tag:yaml.org,2002:int> ",
    "? [a, b]\n: c\n",
    "? {a: 1}\n: c\n",
    "%YAML 1.1\n---\n",
    "%TAG ! tag:x,2000:\n---\n",
    "---\n",
    "...\n",
    "- ",
    "  ",
    "\t",
    "\ufeff",
    "\x00",
    "[",
    "]",
    "{",
    "}",
    ",",
    ": ",
    "\n",
    "|\n  x\n",
    ">-\n  x\n",
    "'",
    '"',
    '"\\x00\\u2028"',
    "0b",
    "0x",
    "0o7",
    "1_0",
    "2001-13-45",
    "2001-02-29 25:61:61",
    "1e400",
    ".nan",
    "-.inf",
    "9" * 5000,
    "~",
    "cluster:\n  instance_groups: []\n",
    "trainer: {steps: 1}\n",
]
yaml_texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=24).map("".join),
    st.text(max_size=200),
    st.builds(lambda n, o, c: o * n + "x" + c * n, st.integers(1, 20_000), *[st.sampled_from("[{")] * 2).map(
        lambda s: s.replace("{x{", "{x:{")
    ),
    st.builds(lambda n: "".join(f"{'  ' * i}k{i}:\n" for i in range(n)) + "  " * n + "v\n", st.integers(1, 3000)),
    st.builds(lambda n: "".join(f"{'  ' * i}- \n" for i in range(n)) + "  " * n + "v\n", st.integers(1, 3000)),
)


@st.composite
def damaged_tiny(draw) -> str:
    """tiny.yaml with fragments inserted and spans deleted at random offsets."""
    text = TINY_TEXT
    for _ in range(draw(st.integers(1, 4), label="edits")):
        at = draw(st.integers(0, len(text)), label="at")
        if draw(st.booleans(), label="insert"):
            text = text[:at] + draw(st.sampled_from(FRAGMENTS) | st.text(max_size=8), label="insert") + text[at:]
        else:
            text = text[:at] + text[at + draw(st.integers(1, 40), label="span") :]
    return text


@FUZZ
@given(text=st.one_of(yaml_texts, damaged_tiny()))
def test_arbitrary_yaml_text_loads_or_is_refused_in_one_line(workdir, text):
    path = workdir / "text.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    _check(path, [])


@FUZZ
@given(data=st.binary(max_size=300) | st.builds(lambda b: TINY_TEXT.encode() + b, st.binary(min_size=1, max_size=8)))
def test_arbitrary_bytes_load_or_are_refused_in_one_line(workdir, data):
    path = workdir / "bytes.yaml"
    path.write_bytes(data)
    _check(path, [])


KNOWN_KEYS = [".".join(str(p) for p in path) for path in _paths(CONFIGS["tiny"])]
INDICES = ["0", "1", "3", "4", "-1", "00", "1e1", " 1", "\u00b2", "\u0663", "99999999999999999999999", ""]
"""What a list index of a `--set` key might be: in range or not, and digits `int()` reads or refuses."""
override_keys = st.one_of(
    st.sampled_from(KNOWN_KEYS),
    st.builds(
        lambda lst, i, rest: ".".join([lst, i, *rest]),
        st.sampled_from(["pipeline.ops", "cluster.instance_groups", "pipeline.ops.1.scale"]),
        st.sampled_from(INDICES),
        st.lists(st.sampled_from(FIELDS), max_size=2),
    ),
    st.builds(lambda k, extra: f"{k}.{extra}", st.sampled_from(KNOWN_KEYS), st.sampled_from(FIELDS) | keys.map(str)),
    st.lists(st.sampled_from(FIELDS) | st.integers(0, 5).map(str) | st.text(max_size=6), max_size=5).map(".".join),
    st.text(max_size=20),
)
override_values = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.text(max_size=40),
    values.map(lambda v: yaml.safe_dump(v, default_flow_style=True, width=1 << 20).removesuffix("\n...\n").strip()),
)
overrides = st.lists(
    st.one_of(st.builds(lambda k, v: f"{k}={v}", override_keys, override_values), st.text(max_size=30)),
    min_size=1,
    max_size=5,
)


@FUZZ
@given(items=overrides)
def test_random_overrides_apply_or_are_refused_in_one_line(workdir, items):
    path = workdir / "tiny.yaml"
    if not path.exists():
        path.write_text(TINY_TEXT)
    _check(path, items)


def test_the_strategies_reach_both_outcomes(workdir):
    """The mutations are not all refused: an untouched config and a harmless override load."""
    path = workdir / "tiny.yaml"
    path.write_text(TINY_TEXT)
    assert load_config(path, ["trainer.steps=7"]).trainer.steps == 7
    with pytest.raises(ConfigError, match=r"trainer\.steps: Input should be greater than 0 \(got -7\)$"):
        load_config(path, ["trainer.steps=-7"])


def _edit(old: str, new: str) -> str:
    assert old in TINY_TEXT
    return TINY_TEXT.replace(old, new)


TRAIN = "  train:\n    source: builtin:digits/train"
VALIDATION = "  validation:\n    source: builtin:digits/validation"

# What the fuzz found (each raised the exception named, or printed more than one line, before its fix
# in smlaunch/config/loader.py), and what each gives now.
FOUND = [
    pytest.param(  # ValueError
        "job: tiny",
        "job: 2001-13-45",
        [],
        "line 2: not valid YAML (cannot read '2001-13-45' as timestamp (month",
        id="date",
    ),
    pytest.param(  # ValueError
        "seed: 0", "seed: !!int 0b", [], "line 3: not valid YAML (cannot read '0b' as int (invalid literal", id="0b"
    ),
    pytest.param(  # IndexError
        "seed: 0", "seed: !!int ''", [], "line 3: not valid YAML (cannot read '' as int (string index", id="empty-int"
    ),
    pytest.param(  # AttributeError
        "job: tiny", "job: !!timestamp x", [], "line 2: not valid YAML (cannot read 'x' as timestamp (", id="timestamp"
    ),
    pytest.param(  # KeyError
        "job: tiny", "job: !!bool x", [], "line 2: not valid YAML (cannot read 'x' as bool ('x'))", id="bool-tag"
    ),
    pytest.param(  # ValueError
        "job: tiny",
        "job: !!set x",
        [],
        "line 2: not valid YAML (expected a mapping node, but found scalar)",
        id="set-tag",
    ),
    pytest.param(  # ValueError: Python's limit on an int's digits
        "seed: 0", "seed: " + "9" * 5000, [], "line 3: not valid YAML (cannot read '99999", id="5000-digits"
    ),
    pytest.param(  # RecursionError
        "seed: 0", "seed: " + "[" * 5000, [], "line 3: not valid YAML (nested more than 100 deep)", id="5000-brackets"
    ),
    pytest.param(  # two lines: PyYAML's excerpt of the text
        "job: tiny", "job: \x00", [], "not valid YAML (character '\\x00' at position 89 is not allowed)", id="nul"
    ),
    pytest.param(  # two lines: the key as it was
        "seed: 0",
        "seed: 0",
        ["trainer.bad\nkey=1"],
        "trainer.bad\\nkey: unknown key; valid keys: batch_",
        id="line-break",
    ),
    pytest.param(  # ValueError: '²'.isdigit(), but int('²') fails
        "seed: 0", "seed: 0", ["pipeline.ops.\u00b2=1"], "pipeline.ops is a list of 4; use an index 0..3", id="index-²"
    ),
    pytest.param(  # accepted: a dict that contains itself, for the factory's call or a later json.dumps to meet
        "model:\n  name: test_resnet",
        "model:\n  factory: m:f\n  params: &p {again: *p}",
        [],
        "line 35: not valid YAML (alias *p is inside its own anchor (a cycle))",
        id="cycle",
    ),
    pytest.param(  # a 479 KB line
        "seed: 0",
        "seed: 0\n" + "".join(f"k{i}: 1\n" for i in range(3000)),
        [],
        "; and 2990 more problems",
        id="3000-keys",
    ),
    pytest.param(  # a 100 KB line
        "job: tiny", "job: " + "x" * 100_000, [], f"(got '{'x' * 74}...x')", id="100k-value"
    ),
]


@pytest.mark.parametrize(("old", "new", "overrides", "message"), FOUND)
def test_what_the_fuzz_found_is_refused_in_one_line(workdir, old, new, overrides, message):
    path = workdir / "found.yaml"
    path.write_text(_edit(old, new))
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    assert message in str(caught.value) and len(str(caught.value).splitlines()) == 1, str(caught.value)


def test_merge_keys_load_and_a_key_written_twice_beside_one_is_still_refused(workdir):
    """`<<: *base` was refused by the duplicate-key check (no constructor for the merge tag); the
    merged keys are meant to be overridden, the mapping's own keys still may not repeat."""
    path = workdir / "merge.yaml"
    path.write_text(_edit(TRAIN, TRAIN.replace("train:", "train: &t")).replace(VALIDATION, f"{VALIDATION}\n    <<: *t"))
    cfg = load_config(path)
    assert cfg.channels["validation"].source == "builtin:digits/validation"
    path.write_text(path.read_text().replace("    <<: *t", "    <<: *t\n    source: x"))
    with pytest.raises(ConfigError, match=r"key 'source' appears twice in one mapping \(lines 18 and 20\)"):
        load_config(path)


def test_a_flow_nest_is_refused_before_the_scanner_reads_it_all(workdir):
    """`[` x 100,000 is refused at the 101st bracket: the scanner, which reads ahead while a
    bracket may still open a key, used to check every pending one per token (0.3 s a run)."""
    path = workdir / "nest.yaml"
    path.write_text("[" * 100 + "]" * 100)
    with pytest.raises(ConfigError, match=r"expected a mapping at the top level"):
        load_config(path)
    path.write_text("[" * 100_000)
    with pytest.raises(ConfigError, match=r"line 1: not valid YAML \(nested more than 100 deep\)$"):
        load_config(path)


NUMBERS = [
    (name, path) for name, tree in CONFIGS.items() for path in _paths(tree) if type(_get(tree, path)) in (int, float)
]


@pytest.mark.parametrize(("name", "path"), NUMBERS, ids=[f"{n}:{'.'.join(map(str, p))}" for n, p in NUMBERS])
def test_a_bool_where_a_number_goes_is_refused_at_every_depth(workdir, name, path):
    """Every number of the shipped configs, a list's item or a mapping's value too, replaced by
    `true`: refused naming that number's place. The fuzz's nudges showed `scale: [true, 1.0]` loaded
    as `(1.0, 1.0)`: pydantic's lax mode reads a bool as a number, and the rule was only checked
    on a section's own keys."""
    tree = copy.deepcopy(CONFIGS[name])
    _get(tree, path[:-1])[path[-1]] = True
    file = workdir / "bool.yaml"
    file.write_text(yaml.safe_dump(tree, sort_keys=False))
    with pytest.raises(ConfigError) as caught:
        load_config(file)
    assert f"{'.'.join(map(str, path))}: a number, not true" in str(caught.value), str(caught.value)
