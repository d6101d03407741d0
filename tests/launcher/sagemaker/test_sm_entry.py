"""The entry script's `auto` install (issue 23, item 3): it installs nothing when this Python
already has every dependency at an allowed version, and names what is missing otherwise."""

from pathlib import Path

from smlaunch.launcher.sm_entry import PROJECT, missing_requirements


def project(tmp_path: Path, *dependencies: str) -> Path:
    lines = ", ".join(f'"{d}"' for d in dependencies)
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\ndependencies = [{lines}]\n')
    return tmp_path


def test_this_checkouts_dependencies_are_all_installed_in_its_environment():
    assert missing_requirements(PROJECT) == []


def test_absent_out_of_range_and_extras_dependencies_are_named(tmp_path):
    assert missing_requirements(project(tmp_path, "pyyaml>=5", "numpy")) == []
    assert missing_requirements(project(tmp_path, "pyyaml>=99", "no-such-distribution-here>=1", "numpy")) == [
        "pyyaml>=99",
        "no-such-distribution-here>=1",
    ]
    assert missing_requirements(project(tmp_path, "ray[data]>=2.60")) == []  # pyarrow, pandas, ... are there
    assert missing_requirements(project(tmp_path, "ray[data]>=9")) == ["ray[data]>=9"]


def test_a_project_that_cannot_be_read_means_install(tmp_path):
    assert missing_requirements(tmp_path) is None  # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text("not toml = = =")
    assert missing_requirements(tmp_path) is None


def test_an_unknown_install_mode_is_refused_in_one_line_with_the_failure_file(tmp_path, monkeypatch, capsys):
    from smlaunch.launcher.sm_entry import main

    monkeypatch.setenv("SMLAUNCH_PIP_INSTALL", "yes")
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))
    assert main(["--config", "configs/tiny.yaml"]) == 1
    assert capsys.readouterr().err.strip() == (
        "sm-launch: error: SMLAUNCH_PIP_INSTALL='yes': expected auto, 1 or 0 (sagemaker.install_package)"
    )
    assert (tmp_path / "output" / "failure").read_text().startswith("SMLAUNCH_PIP_INSTALL='yes'")
