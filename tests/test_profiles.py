"""Deployment profiles (fabricsim.config.profiles): expansion, precedence, errors, round trip."""
import subprocess
import sys

import pytest
import yaml

from fabricsim.config.profiles import PROFILES
from fabricsim.config.scenario import Scenario, load_scenario
from fabricsim.errors import ConfigError


def test_spectrum_x_expands_to_the_deployment():
    sc = load_scenario({"profile": "spectrum_x"}).scenario
    assert sc.profile == "spectrum_x"
    assert sc.routing.name == "adaptive"
    assert sc.receiver.name == "ddp"
    assert sc.congestion_control.name == "telemetry"
    assert sc.switch.pfc.enabled and sc.switch.ecn.enabled


def test_ethernet_expands_to_standard_roce():
    sc = load_scenario({"profile": "ethernet"}).scenario
    assert (sc.routing.name, sc.receiver.name, sc.congestion_control.name) == ("ecmp", "go_back_n", "dcqcn_cx")
    assert sc.switch.pfc.enabled


def test_no_profile_keeps_field_defaults():
    a = load_scenario({}).scenario.model_dump(mode="json")
    b = load_scenario({"profile": "none"}).scenario.model_dump(mode="json")
    assert a == b and a["profile"] == "none"
    assert a["routing"]["policy"] == "ecmp" and a["switch"]["pfc"]["enabled"] is False


def test_scenario_settings_win_over_the_profile():
    sc = load_scenario({"profile": "spectrum_x", "switch": {"pfc": {"enabled": False}}}).scenario
    assert not sc.switch.pfc.enabled and sc.routing.name == "adaptive"
    # another model: the profile's parameters for its own model are dropped with it
    sc = load_scenario({"profile": "spectrum_x", "routing": "ecmp"}).scenario
    assert sc.routing.name == "ecmp" and sc.routing.params is None
    sc = load_scenario({"profile": "spectrum_x"}, overrides=["congestion_control.algorithm=none"]).scenario
    assert sc.congestion_control.name == "none"
    sc = load_scenario({}, overrides=["profile=ethernet"]).scenario
    assert sc.routing.name == "ecmp" and sc.congestion_control.name == "dcqcn_cx"


@pytest.mark.parametrize("name", PROFILES.names())
def test_resolved_scenario_reloads_to_the_same_model(name):
    sc = load_scenario({"profile": name}).scenario
    dumped = sc.model_dump(mode="json")
    again = Scenario.model_validate(yaml.safe_load(yaml.safe_dump(dumped))).model_dump(mode="json")
    assert again == dumped


def test_unknown_profile_is_one_clear_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_scenario({"profile": "spectrumx"})
    assert "spectrum_x" in str(e.value) and "profile" in str(e.value)
    f = tmp_path / "bad.yaml"
    f.write_text("name: bad\nprofile: spectrumx\n")
    p = subprocess.run([sys.executable, "-m", "fabricsim.cli", "validate", str(f)], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    line = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(line) == 1 and "bad.yaml" in line[0] and "profile" in line[0] and "did you mean" in line[0]


def test_cli_profile_list_and_show():
    p = subprocess.run([sys.executable, "-m", "fabricsim.cli", "profile", "list"], capture_output=True, text=True)
    assert p.returncode == 0 and {l.split()[0] for l in p.stdout.splitlines()} == set(PROFILES.names())
    p = subprocess.run([sys.executable, "-m", "fabricsim.cli", "profile", "show", "ethernet"],
                       capture_output=True, text=True)
    shown = yaml.safe_load(p.stdout)
    assert shown["routing"]["policy"] == "ecmp" and shown["switch"]["pfc"]["enabled"] is True
    p = subprocess.run([sys.executable, "-m", "fabricsim.cli", "profile", "show", "etherne"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "did you mean 'ethernet'" in p.stderr and "Traceback" not in p.stderr
