"""Throw-away k4d plug-ins for tests: a module plus a dist-info whose entry points
`importlib.metadata` finds once the directory is on sys.path / PYTHONPATH."""

from __future__ import annotations

from pathlib import Path


def write_plugin(directory: str | Path, module: str, source: str,
                 entry_points: dict[str, dict[str, str]]) -> Path:
    """Write `<module>.py` and `<module>-0.0.0.dist-info` declaring `entry_points`
    ({group: {name: "module:attr"}}) into `directory`; returns the directory."""
    directory = Path(directory)
    (directory / f"{module}.py").write_text(source)
    dist = directory / f"{module}-0.0.0.dist-info"
    dist.mkdir()
    name = module.replace("_", "-")
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("\n".join(
        f"[{group}]\n" + "".join(f"{key} = {target}\n" for key, target in targets.items())
        for group, targets in entry_points.items()))
    return directory
