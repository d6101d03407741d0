# Two entry points: `make run` (the main job on a local simulated cluster) and `make test`.
# Both create .venv and install the project into it first; re-run only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: setup run test bench plan clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/sm-launch configs/hetero.yaml

plan: setup
	$(VENV)/bin/sm-launch plan configs/hetero.yaml

test: setup
	$(VENV)/bin/python -m pytest

bench: setup
	$(VENV)/bin/python bench/local_default.py
	$(VENV)/bin/python bench/epoch_boundary.py
	$(VENV)/bin/python bench/bringup.py
	$(VENV)/bin/python bench/entry_startup.py
	$(VENV)/bin/python bench/record_readers.py
	$(VENV)/bin/python bench/formats.py
	$(VENV)/bin/python bench/first_record.py
	$(VENV)/bin/python bench/offload_vs_dataloader.py
	$(VENV)/bin/python bench/train_overhead.py
	$(VENV)/bin/python bench/ddp_scaling.py
	$(VENV)/bin/python bench/advisor.py
	$(VENV)/bin/python bench/seed_workload.py

clean:
	rm -rf $(VENV) runs .pytest_cache
