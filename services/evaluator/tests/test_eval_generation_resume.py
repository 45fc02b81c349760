"""`k4d eval run` resumes only rollouts of the same generation: the model is identified by
its content (manifest file list, or k4d_model.json and the files' sizes and times), and a
cached per-episode result only counts for the prediction it was computed from."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from k4d.tensor_io import sha256_file
from k4d_eval.generate import (
    GENERATION_JSON,
    generation_record,
    model_sha256,
    start_generation,
)


def _k4d_model_dir(path, weights=b"weights-a"):
    (path / "transformer").mkdir(parents=True)
    (path / "k4d_model.json").write_text(json.dumps({"name": "m", "version": "1"}))
    (path / "transformer" / "model.safetensors").write_bytes(weights)
    return path


def _shipped(path, weights=b"weights-a", description="first"):
    """A shipped-model folder: manifest.json (every file's sha256) beside weights/."""
    model = _k4d_model_dir(path / "weights", weights)
    files = [{"path": p.relative_to(model).as_posix(), "size_bytes": p.stat().st_size,
              "sha256": sha256_file(p)} for p in sorted(model.rglob("*")) if p.is_file()]
    (path / "manifest.json").write_text(json.dumps({
        "name": "m", "version": "1", "files": files, "weights_dir": "weights",
        "description": description}))
    return path


def test_a_manifest_identifies_the_model_by_its_files(tmp_path):
    first = model_sha256(str(_shipped(tmp_path / "a")))
    assert first and len(first) == 64
    # same name, version and files, other words: the same model
    assert model_sha256(str(_shipped(tmp_path / "b", description="held-out figures"))) == first
    assert model_sha256(f"file://{tmp_path / 'b'}") == first
    # same name and version, other weights: another model
    assert model_sha256(str(_shipped(tmp_path / "c", weights=b"weights-b"))) != first


def test_a_plain_model_directory_by_its_description_and_files(tmp_path):
    model = _k4d_model_dir(tmp_path / "m")
    first = model_sha256(str(model))
    assert model_sha256(str(model)) == first
    weights = model / "transformer" / "model.safetensors"
    weights.write_bytes(b"weights-b")  # same size, rewritten: its time changes
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = model_sha256(str(model))
    assert second != first
    meta = json.loads((model / "k4d_model.json").read_text())
    (model / "k4d_model.json").write_text(json.dumps({**meta, "num_inference_steps": 8}))
    assert model_sha256(str(model)) not in (first, second)


@pytest.mark.parametrize("ref", ["registry:k4d-demo-small/step-3794", "k4d-demo-small",
                                 "s3://models/m/1", "/no/such/model"])
def test_references_that_are_no_local_directory_have_no_sha256(ref):
    assert model_sha256(ref) is None


def _rollout(root, episode):
    (root / episode).mkdir(parents=True)
    (root / episode / "summary.json").write_text("{}")


def test_rollouts_of_another_model_are_made_again(tmp_path, capsys):
    root = tmp_path / "predictions"
    model = _shipped(tmp_path / "model")
    record = generation_record(str(model), "", 0, False)
    start_generation(root, record)
    _rollout(root, "ep0")
    start_generation(root, generation_record(str(model), "", 0, False))
    assert (root / "ep0").is_dir() and capsys.readouterr().out == ""  # the same: resumed

    # An export of the same name and version with other weights, at the same path.
    (model / "manifest.json").unlink()
    shutil.rmtree(model / "weights")
    _shipped(model, weights=b"weights-b")
    other = generation_record(str(model), "", 0, False)
    assert other["model_sha256"] != record["model_sha256"]
    start_generation(root, other)
    assert not (root / "ep0").exists()
    line = capsys.readouterr().out.strip()
    assert "not of model" in line and other["model_sha256"][:12] in line
    assert json.loads((root / GENERATION_JSON).read_text()) == other


@pytest.mark.parametrize("change", [{"steps": 8}, {"depth": True}, {"backend": "onnx"}])
def test_other_steps_depth_or_backend_are_another_generation(tmp_path, change):
    root = tmp_path / "predictions"
    model = _k4d_model_dir(tmp_path / "m")
    start_generation(root, generation_record(str(model), "", 0, False))
    _rollout(root, "ep0")
    args = {"backend": "", "steps": 0, "depth": False, **change}
    start_generation(root, generation_record(str(model), args["backend"], args["steps"],
                                             args["depth"]))
    assert not (root / "ep0").exists()


def test_a_moved_model_is_the_same_and_unrecorded_rollouts_are_made_again(tmp_path):
    root = tmp_path / "predictions"
    start_generation(root, generation_record(str(_shipped(tmp_path / "a")), "", 0, False))
    _rollout(root, "ep0")
    start_generation(root, generation_record(str(_shipped(tmp_path / "b")), "", 0, False))
    assert (root / "ep0").is_dir()  # same files under another path: kept
    (root / GENERATION_JSON).unlink()  # rollouts nobody recorded (an older k4d eval run)
    start_generation(root, generation_record(str(tmp_path / "b"), "", 0, False))
    assert not (root / "ep0").exists()
    _rollout(root, "ep0")
    (root / GENERATION_JSON).write_text("[1, 2")  # a damaged record: made again too
    start_generation(root, generation_record(str(tmp_path / "b"), "", 0, False))
    assert not (root / "ep0").exists()


def test_a_cached_result_counts_only_for_its_prediction(tmp_path):
    from k4d_eval.eval_runs import EpisodeJob, _cached, settings_key
    from k4d_eval.evaluate import EpisodeResult, Settings

    _rollout(tmp_path / "pred", "ep0")
    job = EpisodeJob("unused", "ep0", str(tmp_path / "pred" / "ep0"), "model",
                     str(tmp_path / "out"), Settings())
    job.cache.parent.mkdir(parents=True)
    job.cache.write_text(json.dumps({
        "settings_key": settings_key(job.settings), "prediction_sha256": job.prediction_sha256(),
        "result": EpisodeResult("ep0", 0).to_json()}))
    assert _cached(job) is not None
    (tmp_path / "pred" / "ep0" / "summary.json").write_text('{"model": {"id": "other"}}')
    assert _cached(job) is None
