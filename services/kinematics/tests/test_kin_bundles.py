"""Safe bundle extraction: valid zip/tar trees extract; escapes, links out of the tree,
special files, oversized entries and decompression bombs are rejected."""

import io
import tarfile
import zipfile

import pytest
from k4d.errors import InvalidArgument
from k4d.robots.bundles import BundleLimits, safe_extract


def _zip(path, entries):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def _tar(path, members, mode="w:gz"):
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def test_zip_and_tar_extract_regular_trees(tmp_path):
    entries = [("robot/urdf/r.urdf", b"<robot/>"), ("robot/meshes/a.stl", b"solid")]
    files = safe_extract(_zip(tmp_path / "b.zip", entries), tmp_path / "z")
    assert sorted(files) == ["robot/meshes/a.stl", "robot/urdf/r.urdf"]
    assert (tmp_path / "z/robot/meshes/a.stl").read_bytes() == b"solid"
    tar = _tar(tmp_path / "b.tgz", [_file("r.urdf", b"<robot/>"), _file("m/a.stl"),
                                    _link("m/b.stl", "a.stl"), _link("m/c.stl", "m/a.stl", tarfile.LNKTYPE)])
    files = safe_extract(tar, tmp_path / "t")
    assert sorted(files) == ["m/a.stl", "m/b.stl", "m/c.stl", "r.urdf"]
    assert not (tmp_path / "t/m/b.stl").is_symlink()  # links become copies


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/evil", "a/../../evil", "a\\..\\evil", "C:/evil"])
def test_path_escapes_are_rejected(tmp_path, name):
    with pytest.raises(InvalidArgument):
        safe_extract(_zip(tmp_path / "b.zip", [(name, b"x")]), tmp_path / "out")
    with pytest.raises(InvalidArgument):
        safe_extract(_tar(tmp_path / "b.tar", [_file(name)], "w"), tmp_path / "out2")
    assert not (tmp_path / "evil.txt").exists()


@pytest.mark.parametrize("member", [
    _link("m/x.stl", "../../outside.stl"),
    _link("m/x.stl", "/etc/passwd"),
    _link("m/x.stl", "../../../etc/passwd", tarfile.LNKTYPE),
])
def test_links_out_of_the_tree_are_rejected(tmp_path, member):
    with pytest.raises(InvalidArgument, match="leaves the tree"):
        safe_extract(_tar(tmp_path / "b.tar", [_file("m/a.stl"), member]), tmp_path / "out")


def test_zip_symlink_entry_out_of_tree_is_rejected(tmp_path):
    path = tmp_path / "b.zip"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo("evil")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "../../etc/passwd")
    with pytest.raises(InvalidArgument, match="leaves the tree"):
        safe_extract(path, tmp_path / "out")


def test_special_files_are_rejected(tmp_path):
    info = tarfile.TarInfo("dev")
    info.type = tarfile.CHRTYPE
    with pytest.raises(InvalidArgument, match="special file"):
        safe_extract(_tar(tmp_path / "b.tar", [(info, None)]), tmp_path / "out")


def test_file_count_and_size_limits(tmp_path):
    many = [(f"f{i}", b"x") for i in range(11)]
    with pytest.raises(InvalidArgument, match="more than 10 entries"):
        safe_extract(_zip(tmp_path / "a.zip", many), tmp_path / "o1", BundleLimits(max_files=10))
    with pytest.raises(InvalidArgument, match="larger than"):
        safe_extract(_zip(tmp_path / "b.zip", [("big", b"x" * 2000)]), tmp_path / "o2",
                     BundleLimits(max_file_bytes=1000))


def test_decompression_bomb_is_stopped_while_streaming(tmp_path):
    bomb = _zip(tmp_path / "bomb.zip", [("zeros.bin", b"\0" * (8 * 1024 * 1024))])
    assert bomb.stat().st_size < 64 * 1024
    limits = BundleLimits(max_ratio=10.0, ratio_floor_bytes=1024 * 1024)
    with pytest.raises(InvalidArgument, match="decompression-bomb"):
        safe_extract(bomb, tmp_path / "out", limits)
    written = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written <= 2 * 1024 * 1024  # stopped early, not after writing 8 MiB


def test_duplicate_names_and_garbage_archives(tmp_path):
    tar = _tar(tmp_path / "d.tar", [_file("a"), _file("./a")], "w")
    with pytest.raises(InvalidArgument, match="duplicate"):
        safe_extract(tar, tmp_path / "o1")
    garbage = tmp_path / "g.zip"
    garbage.write_bytes(b"not an archive at all")
    with pytest.raises(InvalidArgument, match="not a zip or tar"):
        safe_extract(garbage, tmp_path / "o2")
    (tmp_path / "o3").mkdir()
    (tmp_path / "o3" / "keep").write_text("x")
    with pytest.raises(InvalidArgument, match="empty"):
        safe_extract(tar, tmp_path / "o3")
