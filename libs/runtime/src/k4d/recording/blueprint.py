"""The layout a recording opens on, derived from what was logged: the 3D scene large on the
left (one per clip for a comparison), the camera image(s) and the plots on the right."""

from __future__ import annotations

from k4d.recording import layout


def build_blueprint(clip_roots: list[str], plots: list[str]):
    """clip_roots: `world` or the comparison's two roots; plots: names under `plots/`."""
    import rerun.blueprint as rrb

    def label(root: str) -> str:
        return root.rsplit("/", 1)[-1].replace("_", " ") if root != layout.WORLD else ""

    scenes, cameras = [], []
    for root in clip_roots:
        others = [f"- {r}/**" for r in clip_roots if r != root]
        contents = [f"+ {layout.WORLD}/**", *others]
        name = " ".join(x for x in ("3D", label(root)) if x)
        scenes.append(rrb.Spatial3DView(origin=layout.WORLD, contents=contents, name=name))
        cameras.append(rrb.Spatial2DView(origin=f"{root}/{layout.IMAGE}",
                                         name=" ".join(x for x in ("camera", label(root)) if x)))
    tabs = [rrb.TimeSeriesView(origin=f"{layout.PLOTS}/{p}", name=p.replace("/", ": "))
            for p in plots]
    tabs.append(rrb.TextDocumentView(origin=layout.NOTES, name="notes"))
    side = rrb.Vertical(rrb.Horizontal(*cameras) if len(cameras) > 1 else cameras[0],
                        rrb.Tabs(*tabs), row_shares=[1, 1])
    main = rrb.Vertical(*scenes) if len(scenes) > 1 else scenes[0]
    # the data fills the window: the blueprint and selection panels start collapsed
    return rrb.Blueprint(rrb.Horizontal(main, side, column_shares=[3, 2]),
                         rrb.BlueprintPanel(state="collapsed"),
                         rrb.SelectionPanel(state="collapsed"), rrb.TimePanel(state="expanded"))
