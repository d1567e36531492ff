"""simulation.compute: gaps (plain delays) versus gpu (a GPU computes one job at a time)."""
from __future__ import annotations

import fabricsim


def run(tmp_path, rows, compute):
    p = tmp_path / "t.csv"
    p.write_text("id,src,dst,size_bytes,op,phase,layer,microbatch,deps,gap_ps,start_ps\n" + "\n".join(rows) + "\n")
    return fabricsim.run({"name": "c", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
                          "traffic": {"pattern": "trace", "path": str(p)},
                          "simulation": {"compute": compute}})


G = 10_000_000   # 10 us of compute


def test_gpu_compute_serialises_jobs_on_one_gpu_and_shares_a_job(tmp_path):
    rows = [
        "0,1,0,4096,a,other,0,0,,0,0",          # two inputs arriving at GPU 0 together
        "1,2,0,4096,a,other,0,0,,0,0",
        f"2,0,3,4096,b,other,0,0,0,{G},0",      # job X on GPU 0 (after message 0)
        f"3,0,2,4096,b,other,0,0,1,{G},0",      # job Y on GPU 0 (after message 1)
        f"4,0,1,4096,b,other,0,0,1,{G},0",      # same sender, deps and gap as 3: the same job Y
    ]
    gaps = run(tmp_path, rows, "gaps").messages.set_index("message_id")
    gpu = run(tmp_path, rows, "gpu")
    m = gpu.messages.set_index("message_id")
    # with plain gaps every dependent leaves G after its dependency
    assert gaps.loc[2, "release_ps"] == gaps.loc[0, "end_ps"] + G
    assert gaps.loc[3, "release_ps"] == gaps.loc[1, "end_ps"] + G
    # on a GPU the two jobs run one after the other; message 4 shares job Y with message 3
    first, second = sorted([(m.loc[0, "end_ps"], 2), (m.loc[1, "end_ps"], 3)])
    assert m.loc[first[1], "release_ps"] == first[0] + G
    assert m.loc[second[1], "release_ps"] == max(second[0], first[0] + G) + G
    assert m.loc[4, "release_ps"] == m.loc[3, "release_ps"]
    c = gpu.summary["compute"]
    assert c["busy_ps_max"] == 2 * G
    assert c["exposed_communication_ps"] == gpu.summary["pattern"]["duration_ps"] - 2 * G
    assert "compute" not in run(tmp_path, rows, "gaps").summary


def test_overlap_hides_communication_when_the_gpu_computes_one_job_at_a_time(tmp_path):
    from click.testing import CliRunner
    from fabricsim.cli import main
    dur = {}
    for overlap in ("none", "a2a_1f1b"):
        out = tmp_path / f"{overlap}.parquet"
        r = CliRunner().invoke(main, ["trace", "moe", "-o", str(out), "--preset", "gpt-oss-20b", "--gpus", "8",
                                      "--ep-size", "8", "--tokens-per-gpu", "16", "--layers", "2",
                                      "--microbatches", "4", "--overlap", overlap, "--seed", "2"])
        assert r.exit_code == 0, r.output
        for compute in ("gaps", "gpu"):
            res = fabricsim.run({"name": "o", "topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 2},
                                 "traffic": {"pattern": "trace", "path": str(out)},
                                 "simulation": {"compute": compute}})
            assert res.summary["messages"]["completed"] == res.summary["messages"]["total"]
            dur[overlap, compute] = res.summary["pattern"]["duration_ps"]
            if compute == "gpu":
                dur[overlap, "exposed"] = res.summary["compute"]["exposed_communication_ps"]
    # without overlap a GPU never has two jobs at once: both compute models agree exactly
    assert dur["none", "gpu"] == dur["none", "gaps"]
    # overlap shortens the step in both models (the network is not monotone, so the two overlap
    # durations need not be ordered)
    assert dur["a2a_1f1b", "gaps"] < dur["none", "gaps"]
    assert dur["a2a_1f1b", "gpu"] < dur["none", "gpu"]
    # and it is the exposed communication that shrinks
    assert dur["a2a_1f1b", "exposed"] < dur["none", "exposed"]
