"""`k4d policy-eval`: report math against scipy and the definition of MMRV, bad CLI input,
and a small end-to-end run (tiny world model, a real but unreachable gRPC policy) that is
resumable per episode."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest


def test_policy_mmrv_matches_its_definition():
    from k4d_policy.report import mmrv

    real, sim = [0.9, 0.5, 0.2], [0.8, 0.1, 0.3]  # policies 2 and 3 swapped in simulation
    # i=0: no violation; i=1: with j=2 |0.5-0.2| = 0.3; i=2: with j=1 0.3 -> mean 0.2
    assert mmrv(real, sim) == pytest.approx(0.2)
    assert mmrv(real, real) == 0.0


def test_policy_correlations_are_scipys_and_none_when_undefined():
    from k4d_policy.report import correlations
    from scipy.stats import pearsonr, spearmanr

    r, s = [0.1, 0.4, 0.5, 0.9], [0.2, 0.3, 0.7, 0.8]
    c = correlations(r, s)
    assert c["pearson"] == pytest.approx(pearsonr(r, s).statistic)
    assert c["spearman"] == pytest.approx(spearmanr(r, s).statistic)
    assert correlations([0.5, 0.5], [0.1, 0.2])["pearson"] is None


def _rec(policy, task, index, phys, wm, status=("ok", "ok"), error=""):
    return {"policy": policy, "task": task, "index": index, "episode": f"{policy}__{task}__{index:04d}",
            "physics": {"status": status[0], "success": phys, "error": error, "seconds": 1.0},
            "world_model": {"status": status[1], "success": wm, "error": error, "seconds": 2.0}}


def test_policy_report_cells_confusion_and_bad_input_lines():
    from k4d_policy.evaluate import EvalConfig
    from k4d_policy.report import build_report

    cfg = EvalConfig(policies=["expert", "clumsy", "grpc://h:1"], tasks=["pick"], scenes=2, seed=7000, out="/x")
    records = [_rec("expert", "pick", 0, True, True), _rec("expert", "pick", 1, True, False),
               _rec("clumsy", "pick", 0, False, False),
               _rec("clumsy", "pick", 1, None, None, ("malformed", "malformed"),
                    "policy 'clumsy' at step 6: action chunk has NaN/inf (row 0, joint 2)"),
               _rec("grpc://h:1", "pick", 0, None, None, ("not_evaluated", "not_evaluated"),
                    "policy server h:1: Reset failed (UNAVAILABLE: ...)")]
    report = build_report(cfg, records)
    cells = {(r["policy"], r["task"]): r for r in report["policies"]}
    assert cells[("expert", "pick")] == {"policy": "expert", "task": "pick", "n": 2,
                                         "world_model_success": 0.5, "physics_success": 1.0}
    assert cells[("clumsy", "pick")]["n"] == 1  # the malformed episode is not counted
    assert report["confusion"]["tp"] == 1 and report["confusion"]["fn"] == 1 and report["confusion"]["tn"] == 1
    assert report["episode_agreement"] == pytest.approx(2 / 3)
    assert any("'clumsy' at step 6" in line for line in report["malformed_actions"])
    assert {n["policy"] for n in report["not_evaluated"]} == {"grpc://h:1"}
    assert set(report["correlation"]) == {"pearson", "spearman", "mmrv"}
    goal = report["goals"]["episode_agreement"]
    assert goal["met"] is False and goal["missed_by"] == pytest.approx(0.85 - 2 / 3, abs=1e-4)
    assert report["per_task"]["pick"]["world_model_judge_when_physics_succeeded"]["episodes"] == 2


@pytest.mark.parametrize("argv, field", [
    (["--tasks", "fly"], "--tasks"),
    (["--policies", "grpc://nohost"], "--policies"),
    (["--policies", "nobody"], "--policies"),
    (["--workers", "0"], "--workers"),
    (["--shard-index", "3"], "--shard-index"),
    (["--framing", "fisheye"], "--framing"),
])
def test_policy_eval_bad_input_is_one_line_and_exit_2(argv, field, tmp_path, capsys):
    from k4d.cli.main import main

    code = main(["policy-eval", "--scenes", "1", "--seed", "7000", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and field in err[0]


def test_policy_eval_framing_draws_the_scenes_camera_and_keys_the_records():
    from k4d_policy.evaluate import EvalConfig, _scenario

    wide = EvalConfig(policies=["expert"], tasks=["pick"], scenes=1, seed=7000, out="x")
    workspace = EvalConfig(policies=["expert"], tasks=["pick"], scenes=1, seed=7000, out="x",
                           framing="workspace")
    # records made before --framing existed keep their fingerprint; another framing reruns
    assert wide.fingerprint() == "b0e4fb889c401e0b"
    assert workspace.fingerprint() != wide.fingerprint()
    near = _scenario(7000, 0, "pick", 96, 144, "panda", "workspace").scene.camera
    far = _scenario(7000, 0, "pick", 96, 144, "panda", "wide").scene.camera
    distance = lambda cam: np.linalg.norm(np.subtract(cam.eye, cam.target))  # noqa: E731
    assert distance(near) < distance(far)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_policy_eval_end_to_end_is_resumable(tiny_model_dir, tmp_path, capsys):
    from k4d.cli.main import main

    dead = f"grpc://127.0.0.1:{_closed_port()}"
    out = tmp_path / "eval"
    argv = ["policy-eval", "--policies", f"expert,{dead}", "--tasks", "pick", "--scenes", "1", "--seed", "7000",
            "--model", str(tiny_model_dir), "--chunk", "2", "--timeout", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["clip"] == [5, 32, 48] and report["settings"]["horizon"] == 4
    expert = [r for r in report["policies"] if r["policy"] == "expert"][0]
    assert expert["n"] == 1 and expert["physics_success"] in (0.0, 1.0)
    dead_rows = [n for n in report["not_evaluated"] if n["policy"] == dead]
    assert len(dead_rows) == 2 and all(dead[len("grpc://"):] in n["error"] for n in dead_rows)
    summary = (out / "summary.md").read_text()
    assert "scatter.png" in summary and (out / "scatter.png").stat().st_size > 1000
    assert report["recordings"] and (out / report["recordings"][0]).is_file()
    record = json.loads((out / "episodes" / "expert__pick__0000.json").read_text())
    assert record["world_model"]["status"] == "ok" and record["physics"]["acts"] == 2
    with np.load(out / "clips" / "expert__pick__0000.npz") as clips:
        assert clips["physics_rgb"].shape == clips["world_model_rgb"].shape == (5, 32, 48, 3)
    capsys.readouterr()
    assert main(argv) == 0  # resumed: nothing left to run
    assert "0 run, 2 already recorded" in capsys.readouterr().err


@pytest.mark.slow
def test_policy_eval_shards_into_s3_and_reports_from_the_records(tiny_model_dir, s3_server, monkeypatch, capsys):
    """Two Indexed-Job shards write episode records under one s3:// prefix; --report-only
    reads them all back."""
    from k4d.cli.main import main
    from k4d.store import open_store

    for name, value in (("K4D_S3_ENDPOINT", s3_server.endpoint), ("K4D_S3_ACCESS_KEY", s3_server.access_key),
                        ("K4D_S3_SECRET_KEY", s3_server.secret_key), ("K4D_S3_REGION", s3_server.region)):
        monkeypatch.setenv(name, value)
    uri = "s3://k4d-policy-test/run"
    common = ["policy-eval", "--policies", "expert", "--tasks", "push", "--scenes", "2", "--seed", "7001",
              "--model", str(tiny_model_dir), "--chunk", "2", "--out", uri, "--no-progress", "--no-recordings"]
    for shard in ("0", "1"):
        assert main([*common, "--shard-index", shard, "--shard-count", "2"]) == 0
    store = open_store(uri)
    assert sorted(store.list("episodes/")) == ["episodes/expert__push__0000.json", "episodes/expert__push__0001.json"]
    assert not store.exists("report.json")  # a shard writes records only
    assert main([*common, "--report-only"]) == 0
    report = json.loads(store.get_bytes("report.json"))
    assert report["policies"][0]["n"] == 2 and report["episodes"]["recorded"] == 2
