"""Every metric the evaluator reports, in one registry (torchmetrics' shape: a metric is an
object with its state, `compute` and `higher_is_better`; STYLE.md).

Two kinds:
- frame metrics (`k4d_eval.stats.FrameMetric`): additive per-frame statistics per region,
  reduced per frame, then the mean; `frame_metrics()` builds them configured, in the order
  report.json lists their outputs;
- clip metrics (`k4d_eval.learned.OUTPUTS`: LPIPS, FID, FVD, latent L2): one value per
  evaluation, computed by `learned.LearnedMetrics`.

`info(name)` answers for any reported name (report.json `metrics`, `regions`, `per_frame`,
`episodes`, the paper rows): its direction and its format in summary.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from k4d_eval import geometry, learned, video_metrics
from k4d_eval.stats import FrameMetric, MetricInfo


def frame_metrics(psnr_max_db: float = video_metrics.PSNR_MAX_DB) -> tuple[FrameMetric, ...]:
    """Every frame metric, configured, in report order (video first, then per space)."""
    return (video_metrics.PSNR(max_db=psnr_max_db), video_metrics.SSIM(), geometry.Chamfer(),
            geometry.TemporalChamfer(), geometry.TemporalChamferGT(), geometry.Depth(),
            geometry.PointL1())


def groups(metrics: tuple[FrameMetric, ...]) -> Iterator[tuple[FrameMetric, str, str]]:
    """(metric, its EpisodeResult group key, the suffix of its reported names) per stats
    group, in report order: the video metrics, then every geometry metric once per space
    (all of metres, then all of the Kinema4D normalisation)."""
    yield from ((m, m.group_key(), "") for m in metrics if not m.geometry)
    for space in geometry.SPACES:
        yield from ((m, m.group_key(space), geometry.space_suffix(space))
                    for m in metrics if m.geometry)


def _all_infos() -> dict[str, MetricInfo]:
    infos = []
    for metric, _, suffix in groups(frame_metrics()):
        infos += metric.reported(suffix)
    infos += learned.OUTPUTS
    return {i.name: i for i in infos}


METRICS: dict[str, MetricInfo] = _all_infos()


def info(name: str) -> MetricInfo:
    """The registry entry of a reported metric name; KeyError names an unregistered one."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in k4d_eval.metric_registry") from None
