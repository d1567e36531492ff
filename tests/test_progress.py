"""What a run shows while it goes on (api.Progress): on a terminal, one line naming the phase
(preparing, building the engine, simulating with the simulated time, building the results,
writing each table); nothing when stderr is not a terminal or with --quiet."""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_on_a_terminal(args, cwd):
    """Run the CLI with stderr on a pseudo-terminal; return (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    # a terminal of 50 rows x 200 columns (a new pseudo-terminal has no size, and tqdm draws nothing then)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "fabricsim", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:          # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(), out.decode(errors="replace")


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals")
def test_a_run_on_a_terminal_names_every_phase(tmp_path):
    # the quickstart fabric with 16 MiB per GPU: a few seconds, past the line's 1 s delay
    code, tty = _run_on_a_terminal(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "-o", str(tmp_path / "r"),
                                    "--set", "traffic.message_size=16MiB", "--set", "profile=none"], tmp_path)
    assert code == 0, tty
    assert "us simulated" in tty and "us/s)" in tty
    assert "writing messages (32 rows, parquet/csv)" in tty
    assert "writing links" in tty
    code, tty = _run_on_a_terminal(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "-o", str(tmp_path / "q"),
                                    "--set", "profile=none", "-q"], tmp_path)
    assert code == 0 and "simulat" not in tty and "writing" not in tty


def test_nothing_is_shown_when_stderr_is_not_a_terminal(tmp_path):
    p = subprocess.run([sys.executable, "-m", "fabricsim", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
                        "-o", str(tmp_path / "r"), "--set", "profile=none"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "simulating" not in p.stderr and "writing" not in p.stderr and "preparing" not in p.stderr
