# Two entry points: `make run` (the main job on a local simulated cluster) and `make test`.
# Both create .venv and install the project into it first; re-run only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: setup sdk-venvs tini run test check docs bench plan clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

setup: $(STAMP)

# The SageMaker Python SDK majors docs/sagemaker.md's recipes are tested with (tests/launcher/sagemaker/test_sdk_recipes.py),
# each in its own venv: both are the `sagemaker` distribution, and their pins clash with the project's.
SDK_V2 := sagemaker==2.257.*
SDK_V3 := sagemaker==3.27.*
.venv-sdk/%/.installed:
	$(PYTHON) -m venv .venv-sdk/$*
	.venv-sdk/$*/bin/python -m pip install --quiet --upgrade pip
	.venv-sdk/$*/bin/python -m pip install --quiet '$(SDK_$(shell echo $* | tr a-z A-Z))'
	touch $@

sdk-venvs: .venv-sdk/v2/.installed .venv-sdk/v3/.installed

# tini, for tests/launcher/job/test_pid1_kinds.py (the init most images use as PID 1): installed where
# apt-get can as root, else the tests use a stand-in (tests/support/tini_standin.py). Never fails.
tini:
	@command -v tini >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get install -y -qq tini >/dev/null 2>&1 && echo "installed tini"; } || echo "no tini: its stand-in is tested"

run: setup
	$(VENV)/bin/sm-launch configs/hetero.yaml

plan: setup
	$(VENV)/bin/sm-launch plan configs/hetero.yaml

test: setup sdk-venvs tini
	$(VENV)/bin/python -m pytest

# Lint, format, types and the layers' contracts (pyproject.toml holds each tool's settings).
check: setup
	$(VENV)/bin/ruff check smlaunch tests bench scripts
	$(VENV)/bin/ruff format --check smlaunch tests bench scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The generated reference pages (configuration, CLI), then the site, warnings as errors.
docs: setup
	$(VENV)/bin/python scripts/gen_docs.py
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

bench: setup
	$(VENV)/bin/python bench/local_default.py
	$(VENV)/bin/python bench/elastic.py
	$(VENV)/bin/python bench/held_loop.py
	$(VENV)/bin/python bench/track.py
	$(VENV)/bin/python bench/epoch_boundary.py
	$(VENV)/bin/python bench/bringup.py
	$(VENV)/bin/python bench/startup.py
	$(VENV)/bin/python bench/entry_startup.py
	$(VENV)/bin/python bench/record_readers.py
	$(VENV)/bin/python bench/formats.py
	$(VENV)/bin/python bench/first_record.py
	$(VENV)/bin/python bench/scale_listing.py --scratch /tmp/scale-scratch
	$(VENV)/bin/python bench/scale.py --scratch /tmp/scale-scratch
	$(VENV)/bin/python bench/offload_vs_dataloader.py
	$(VENV)/bin/python bench/train_overhead.py
	$(VENV)/bin/python bench/byo.py
	$(VENV)/bin/python bench/user_loop.py
	$(VENV)/bin/python bench/ddp_scaling.py
	$(VENV)/bin/python bench/advisor.py
	$(VENV)/bin/python bench/seed_workload.py
	$(VENV)/bin/python bench/long_run.py
	$(VENV)/bin/python bench/checkpoint_cost.py
	$(VENV)/bin/python bench/recipe.py
	$(VENV)/bin/python bench/security.py
	$(VENV)/bin/python bench/cache.py
	$(VENV)/bin/python bench/cache_scale.py --scratch /tmp/cache-scale-scratch

clean:
	rm -rf $(VENV) .venv-sdk runs .pytest_cache
