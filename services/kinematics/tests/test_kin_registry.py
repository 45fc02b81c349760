"""Bundles registered in the object store load back as robots; bad bundles are refused."""

import json
import zipfile

import numpy as np
import pytest
from k4d.errors import InvalidArgument, NotFound
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.robots.registry import RobotRegistry
from k4d.store import LocalStore

URDF = """<robot name="twolink">
  <link name="base"><visual><geometry><mesh filename="package://twolink/meshes/base.stl"/></geometry></visual></link>
  <link name="arm"><visual><geometry><mesh filename="../meshes/arm.stl"/></geometry></visual></link>
  <link name="tip"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="arm"/>
    <axis xyz="0 0 1"/><limit lower="-2" upper="2"/></joint>
  <joint name="j2" type="fixed"><parent link="arm"/><child link="tip"/><origin xyz="0.5 0 0"/></joint>
</robot>"""


def _bundle(path, urdf=URDF, extra=()):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("twolink/urdf/twolink.urdf", urdf)
        zf.writestr("twolink/meshes/base.stl", "solid b\nendsolid b\n")
        zf.writestr("twolink/meshes/arm.stl", "solid a\nendsolid a\n")
        for name, data in extra:
            zf.writestr(name, data)
    return path


@pytest.fixture
def registry(tmp_path):
    return RobotRegistry(LocalStore(tmp_path / "store"), cache_dir=tmp_path / "cache")


def test_register_then_load_from_the_store(tmp_path, registry):
    model = registry.register(_bundle(tmp_path / "b.zip"))
    assert model.name == "twolink" and model.joint_names == ["j1"] and model.ee_link == "tip"
    assert registry.names() == ["twolink"]
    assert all(p.startswith(str(tmp_path / "cache")) for p in model.mesh_files)
    # A fresh registry with an empty cache fetches and extracts the stored bundle.
    fresh = RobotRegistry(registry.store, cache_dir=tmp_path / "cache2")
    again = fresh.load("twolink")
    pose = forward_kinematics(again, np.array([np.pi / 2]))[again.link_index("tip")]
    np.testing.assert_allclose(pose[:3, 3], [0, 0.5, 0], atol=1e-12)


def test_load_robot_falls_back_to_the_store(tmp_path, registry):
    registry.register(_bundle(tmp_path / "b.zip"), name="my-arm")
    assert load_robot("my-arm", store=registry.store).name == "my-arm"
    with pytest.raises(NotFound, match="unknown robot"):
        load_robot("other", store=registry.store)


def test_manifest_selects_urdf_and_end_effector(tmp_path, registry):
    manifest = json.dumps({"urdf": "twolink/urdf/twolink.urdf", "ee_link": "arm", "name": "named"})
    model = registry.register(_bundle(tmp_path / "b.zip", extra=[("robot.json", manifest)]))
    assert model.name == "named" and model.ee_link == "arm"


@pytest.mark.parametrize("urdf, extra, message", [
    (URDF.replace("arm.stl", "gone.stl"), (), "missing mesh file"),
    (URDF.replace("</robot>", ""), (), "malformed XML"),
    (URDF, [("second.urdf", URDF)], "exactly one .urdf"),
    (URDF, [("robot.json", '{"urdf": "x.xacro"}')], "plain URDF"),
    (URDF, [("../escape", "x")], "escapes"),
])
def test_bad_bundles_are_refused_and_not_stored(tmp_path, registry, urdf, extra, message):
    with pytest.raises(InvalidArgument, match=message):
        registry.register(_bundle(tmp_path / "b.zip", urdf, extra))
    assert registry.names() == []


def test_builtin_names_and_bad_names_cannot_be_registered(tmp_path, registry):
    with pytest.raises(InvalidArgument, match="builtin"):
        registry.register(_bundle(tmp_path / "b.zip"), name="panda")
    with pytest.raises(InvalidArgument, match="must match"):
        registry.register(_bundle(tmp_path / "b.zip"), name="../x")


class _CountingStore(LocalStore):
    """A real local store that counts full downloads."""

    downloads = 0

    def get_bytes(self, key, expected_sha256=None):
        self.downloads += 1
        return super().get_bytes(key, expected_sha256)


def test_a_bundle_uri_is_fetched_once_then_served_from_the_cache(tmp_path):
    store = _CountingStore(tmp_path / "store")
    store.put_bytes("uploads/b.zip", _bundle(tmp_path / "b.zip").read_bytes())
    registry = RobotRegistry(store, cache_dir=tmp_path / "cache")
    first = registry.load_bundle("uploads/b.zip")
    second = registry.load_bundle("uploads/b.zip")
    assert first.link_names == second.link_names == ["base", "arm", "tip"]
    assert store.downloads == 1
    with pytest.raises(NotFound, match="no robot bundle"):
        registry.load_bundle("uploads/missing.zip")
