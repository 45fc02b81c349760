"""The sample refiner (k4d_model.cascade): its inputs read the decoded sample, a network that
learned nothing passes the sample through, its place in the model directory, and the
`cascade: sample` output option that draws frames t >= 1 from it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d_model import cascade as cascade_module
from k4d_model.cascade import (
    CHANGE_CHANNELS,
    FLOW_SCALE,
    GATE_CHANNELS,
    MATCH_CHANNELS,
    OUTPUT_CHANNELS,
    POINT_GAIN,
    SAMPLE_CHANNELS,
    CascadeConfig,
    FlowMatcher,
    SampleRefiner,
    backward_warp,
    load_cascade,
    refine_sample,
    sample_inputs,
    save_cascade,
)
from k4d_model.checkpoints import load_k4d, save_k4d
from k4d_model.conditions import PointmapNormalization
from k4d_model.options import FidelityOptions
from k4d_model.pipeline import ABLATION_FIRST_FRAME, Kinema4DPipeline, sample_seed
from k4d_model.testing import CallableDenoiser as Denoiser
from k4d_model.testing import sliding_box_robot

SMALL = CascadeConfig(channels=(8, 16))
T, H, W = 3, 12, 20


def _sample(seed: int = 0):
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    rgb = rng.uniform(-1, 1, (T, H, W, 3)).astype(np.float32)
    reference = rng.uniform(-1, 1, (T, H, W, 3)).astype(np.float32)
    pointmap = rng.uniform(-1, 1, (T, H, W, 3)).astype(np.float32)
    return image, rgb, reference, pointmap


def _constant(colour: float, points: float, residual: bool = False) -> SampleRefiner:
    """A network whose change is `colour` and `points` (its output units), added to the
    sample's own change with `residual`."""
    network = SampleRefiner(CascadeConfig(channels=SMALL.channels, residual=residual)).eval()
    with torch.no_grad():
        network.head.bias.copy_(torch.tensor([colour] * 3 + [points] * 3))
    return network


def test_inputs_are_the_image_and_the_samples_change_per_frame():
    image, rgb, reference, pointmap = _sample()
    x = sample_inputs(image, rgb, reference, pointmap)
    assert x.shape == (T - 1, SAMPLE_CHANNELS, H, W)
    t = 1  # frame 2
    assert np.allclose(x[t, :3].permute(1, 2, 0).numpy(), image / 127.5 - 1.0, atol=1e-6)
    assert np.allclose(x[t, 3:6].permute(1, 2, 0).numpy(), rgb[2] - reference[2], atol=1e-6)
    assert np.allclose(x[t, 6:9].permute(1, 2, 0).numpy(),
                       (pointmap[2] - pointmap[0]) * POINT_GAIN, atol=1e-5)
    assert np.allclose(x[t, 9:].permute(1, 2, 0).numpy(), pointmap[0], atol=1e-6)


def test_context_adds_the_neighbouring_frames_change_clamped_to_the_clip():
    frames = 5
    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    rgb, reference, pointmap = (rng.uniform(-1, 1, (frames, H, W, 3)).astype(np.float32)
                                for _ in range(3))
    x = sample_inputs(image, rgb, reference, pointmap, context=2)
    assert x.shape == (frames - 1, CascadeConfig(context=2).inputs, H, W)
    assert CascadeConfig(context=2).inputs == SAMPLE_CHANNELS + 4 * CHANGE_CHANNELS
    own = sample_inputs(image, rgb, reference, pointmap)
    assert torch.equal(x[:, :SAMPLE_CHANNELS], own)  # the same first channels, in order

    def change(frame: int) -> torch.Tensor:  # frame >= 1: its rows in `own`
        return own[frame - 1, 3:9]

    t = 1  # frame 1: t - 1 is frame 0, which has no change of its own -> frame 1
    neighbours = x[t - 1, SAMPLE_CHANNELS:].reshape(4, CHANGE_CHANNELS, H, W)
    for got, frame in zip(neighbours, (1, 2, 1, 3), strict=True):  # offsets -1, +1, -2, +2
        assert torch.equal(got, change(frame))
    neighbours = x[frames - 2, SAMPLE_CHANNELS:].reshape(4, CHANGE_CHANNELS, H, W)
    for got, frame in zip(neighbours, (3, 4, 2, 4), strict=True):  # frame 4, the last
        assert torch.equal(got, change(frame))


def test_several_samples_give_their_mean_and_spread():
    image, rgb, reference, pointmap = _sample(6)
    _, other, _, other_points = _sample(7)
    both = sample_inputs(image, np.stack([rgb, other]), reference,
                         np.stack([pointmap, other_points]), samples=2)
    assert both.shape == (T - 1, CascadeConfig(samples=2).inputs, H, W)
    assert CascadeConfig(samples=2).inputs == SAMPLE_CHANNELS + CHANGE_CHANNELS
    one, two = (sample_inputs(image, r, reference, p) for r, p in
                ((rgb, pointmap), (other, other_points)))
    mean = (one + two) / 2
    assert torch.allclose(both[:, :SAMPLE_CHANNELS], mean, atol=1e-5)
    assert torch.allclose(both[:, SAMPLE_CHANNELS:], (one[:, 3:9] - two[:, 3:9]).abs() / 2,
                          atol=1e-5)
    # one sample, stacked or not, is the plain input
    assert torch.equal(sample_inputs(image, rgb[None], reference, pointmap[None]), one)
    with pytest.raises(ValueError, match="reads 2 sample"):
        sample_inputs(image, rgb, reference, pointmap, samples=2)
    with pytest.raises(ValueError, match="samples must be in 1.."):
        CascadeConfig(samples=0)


def test_a_network_with_context_reads_its_neighbours_and_round_trips(tmp_path):
    config = CascadeConfig(channels=SMALL.channels, context=1)
    torch.manual_seed(0)
    network = SampleRefiner(config).eval()
    torch.nn.init.normal_(network.head.weight, std=0.1)
    image, rgb, reference, pointmap = _sample(5)
    colour, _ = refine_sample(network, image, rgb, reference, pointmap, scale=0.5)
    other = rgb.copy()
    other[2] = -other[2]  # frame 2 is frame 1's neighbour
    changed, _ = refine_sample(network, image, other, reference, pointmap, scale=0.5)
    assert not np.allclose(colour[0], changed[0])
    save_cascade(network, tmp_path)
    loaded = load_cascade(tmp_path)
    assert loaded.config == config
    again, _ = refine_sample(loaded, image, rgb, reference, pointmap, scale=0.5)
    assert np.array_equal(again, colour)


def test_an_untrained_network_draws_no_change_or_with_residual_the_sample():
    image, rgb, reference, pointmap = _sample(1)
    colour, moved = refine_sample(SampleRefiner(SMALL).eval(), image, rgb, reference,
                                  pointmap, scale=0.5)
    assert colour.shape == moved.shape == (T - 1, H, W, 3)
    assert not colour.any() and not moved.any()
    residual = SampleRefiner(CascadeConfig(channels=SMALL.channels, residual=True)).eval()
    colour, moved = refine_sample(residual, image, rgb, reference, pointmap, scale=0.5)
    assert np.allclose(colour, (rgb[1:] - reference[1:]) * 127.5, atol=1e-3)
    assert np.allclose(moved, (pointmap[1:] - pointmap[:1]) * 0.5, atol=1e-5)


def test_the_network_reads_the_sample():
    """A trained network that ignored the sample could not be ablated (issue 45): with any
    weights, another sample gives another output."""
    torch.manual_seed(0)
    network = SampleRefiner(SMALL).eval()
    torch.nn.init.normal_(network.head.weight, std=0.1)
    image, rgb, reference, pointmap = _sample(2)
    a, _ = refine_sample(network, image, rgb, reference, pointmap, scale=1.0)
    b, _ = refine_sample(network, image, rgb * 0.5, reference, pointmap, scale=1.0)
    assert not np.allclose(a, b)


def test_backward_warp_samples_frame_zero_where_the_flow_points():
    image = torch.arange(2 * 5 * 7, dtype=torch.float32).reshape(1, 2, 5, 7)
    still = backward_warp(image, torch.zeros(1, 2, 5, 7))
    assert torch.allclose(still, image, atol=1e-4)
    flow = torch.zeros(1, 2, 5, 7)
    flow[:, 0], flow[:, 1] = 2.0, -1.0  # each pixel reads the one 2 right and 1 up
    moved = backward_warp(image, flow)
    assert torch.allclose(moved[..., 1:, :5], image[..., :4, 2:], atol=1e-4)
    assert torch.allclose(moved[..., 0, :5], image[..., 0, 2:], atol=1e-4)  # border kept
    flow[:, 0], flow[:, 1] = 0.5, 0.0  # half a pixel: the mean of the two
    half = backward_warp(image, flow)
    assert torch.allclose(half[..., :6], (image[..., :6] + image[..., 1:]) / 2, atol=1e-4)


def _warping(flow_x: float, weight_logit: float, colour: float = 0.0) -> SampleRefiner:
    """A warping network whose flow is `flow_x` pixels (dx) everywhere, its warp's weight
    sigmoid(`weight_logit`) and its own colour change `colour`."""
    network = SampleRefiner(CascadeConfig(channels=SMALL.channels, warp=True)).eval()
    with torch.no_grad():
        network.head.bias.copy_(torch.tensor([colour] * 3 + [0.0] * 3
                                             + [flow_x / FLOW_SCALE, 0.0, weight_logit]))
    return network


def test_a_warping_network_blends_frame_zero_warped_with_its_own_colour(tmp_path):
    image, rgb, reference, pointmap = _sample(4)
    untrained = SampleRefiner(CascadeConfig(channels=SMALL.channels, warp=True)).eval()
    colour, moved = refine_sample(untrained, image, rgb, reference, pointmap, scale=0.5)
    assert np.abs(colour).max() < 1e-2 and not moved.any()  # no change, as the plain one
    shifted = image[:, 1:].astype(np.float32) - image[:, :-1]  # frame 0 read 1 px right
    colour, _ = refine_sample(_warping(1.0, 30.0), image, rgb, reference, pointmap, scale=0.5)
    assert np.allclose(colour[:, :, :-1], shifted[None], atol=0.05)
    colour, _ = refine_sample(_warping(1.0, -30.0, colour=0.2), image, rgb, reference,
                              pointmap, scale=0.5)  # all the network's own colour
    assert np.allclose(colour, 0.2 * 127.5, atol=1e-3)
    colour, _ = refine_sample(_warping(1.0, 0.0, colour=0.2), image, rgb, reference,
                              pointmap, scale=0.5)  # half and half
    assert np.allclose(colour[:, :, :-1], (shifted[None] + 0.2 * 127.5) / 2, atol=0.05)
    network = _warping(3.0, 1.0)
    save_cascade(network, tmp_path)
    loaded = load_cascade(tmp_path)
    assert loaded.config == network.config and loaded.config.outputs == OUTPUT_CHANNELS + 3
    again, _ = refine_sample(loaded, image, rgb, reference, pointmap, scale=0.5)
    first, _ = refine_sample(network, image, rgb, reference, pointmap, scale=0.5)
    assert np.array_equal(again, first)


def _square_looks(shifts: list[tuple[int, int]], size=(24, 32)):
    """Frame 0 and frame t looks (N, 6, H, W): a grey table, a red 6x6 square at (8, 6) in
    frame 0 moved by each (dx, dy) in frame t (the points: flat), and the backward flow of
    frame t's square pixels (N, 2, H, W) with where it is defined (N, 1, H, W)."""
    h, w = size
    first, current = torch.full((len(shifts), 6, h, w), -0.2), torch.full((len(shifts), 6, h, w), -0.2)
    flow, known = torch.zeros(len(shifts), 2, h, w), torch.zeros(len(shifts), 1, h, w)
    first[:, 0, 6:12, 8:14] = 0.9
    for i, (dx, dy) in enumerate(shifts):
        current[i, 0, 6 + dy:12 + dy, 8 + dx:14 + dx] = 0.9
        flow[i, 0, 6 + dy:12 + dy, 8 + dx:14 + dx] = -dx
        flow[i, 1, 6 + dy:12 + dy, 8 + dx:14 + dx] = -dy
        known[i, :, 6 + dy:12 + dy, 8 + dx:14 + dx] = 1.0
    return first, current, flow, known


def test_a_flow_matcher_learns_where_a_moved_square_came_from():
    # the match is global: a square moved 10-16 px is found where a U-Net's regression was not
    torch.manual_seed(0)
    matcher = FlowMatcher(16)
    optimizer = torch.optim.AdamW(matcher.parameters(), lr=5e-3)
    rng = np.random.default_rng(0)
    for _ in range(60):
        shifts = [(int(rng.integers(-8, 17)), int(rng.integers(-6, 13))) for _ in range(4)]
        first, current, flow, known = _square_looks(shifts)
        loss = (known * (matcher(first, current)[0] - flow).abs()).sum() / known.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    first, current, flow, known = _square_looks([(16, 0), (10, 10), (-8, 6)])
    with torch.no_grad():
        found, confidence = matcher(first, current)
    error = float((known * (found - flow).norm(dim=1, keepdim=True)).sum() / known.sum())
    still = float((known * flow.norm(dim=1, keepdim=True)).sum() / known.sum())
    assert error < 0.2 * still, (error, still)
    assert confidence.shape == known.shape and 0 < float(confidence.min()) <= 1.0


def test_a_matching_network_adds_its_correction_to_the_match(tmp_path):
    with pytest.raises(ValueError, match="warp"):
        CascadeConfig(channels=SMALL.channels, matching=8)
    config = CascadeConfig(channels=SMALL.channels, warp=True, matching=8)
    assert config.inputs == config.sample_inputs + MATCH_CHANNELS == SAMPLE_CHANNELS + 3
    image, rgb, reference, pointmap = _sample(5)
    network = SampleRefiner(config).eval()
    x = sample_inputs(image, rgb, reference, pointmap)
    with torch.no_grad():
        matched = network.matcher(*cascade_module.matcher_looks(x))[0] / FLOW_SCALE
        assert torch.allclose(network(x)[:, 6:8], matched, atol=1e-6)  # no correction yet
        network.head.bias[6] = 0.5
        assert torch.allclose(network(x)[:, 6:8], matched + torch.tensor([0.5, 0.0])[:, None, None],
                              atol=1e-6)
    save_cascade(network, tmp_path)
    loaded = load_cascade(tmp_path)
    assert loaded.config == config and loaded.matcher is not None
    assert np.array_equal(refine_sample(loaded, image, rgb, reference, pointmap, 0.5)[0],
                          refine_sample(network, image, rgb, reference, pointmap, 0.5)[0])


def test_cascade_round_trips_through_its_folder(tmp_path):
    network = _constant(0.1, -0.2)
    save_cascade(network, tmp_path)
    loaded = load_cascade(tmp_path)
    assert loaded.config == network.config
    for (name, x), (_, y) in zip(network.state_dict().items(), loaded.state_dict().items(),
                                 strict=True):
        assert torch.equal(x, y), name
    assert load_cascade(tmp_path / "none") is None
    assert OUTPUT_CHANNELS == 6


@pytest.mark.parametrize("warp", [False, True])
def test_a_gated_network_draws_its_change_where_its_gate_opens(tmp_path, warp):
    config = CascadeConfig(channels=SMALL.channels, gate=True, warp=warp)
    network = SampleRefiner(config).eval()
    assert config.outputs == OUTPUT_CHANNELS + (3 if warp else 0) + GATE_CHANNELS
    x = sample_inputs(*_sample())
    with torch.no_grad():
        assert float(network(x)[:, :6].abs().max()) < 1e-6  # untrained: no change
        network.head.bias[:6] = torch.tensor([0.2] * 3 + [-0.4] * 3)
        network.head.bias[-1] = 0.0  # the gate at 1/2
        out = network(x)
        # with warp the colour is half frame 0 warped at zero flow (no change), half 0.2
        colour = 0.05 if warp else 0.1
        assert torch.allclose(out[:, :3], torch.tensor(colour), atol=1e-6)
        assert out.shape[1] == config.outputs
        assert torch.allclose(out[:, 3:6], torch.tensor(-0.2))
        network.head.bias[-1] = -30.0  # sure that nothing changed: no change drawn
        assert float(network(x)[:, :6].abs().max()) < 1e-6
        network.head.bias[-1] = 30.0  # sure that it changed: the whole change
        assert torch.allclose(network(x)[:, 3:6], torch.tensor(-0.4))
    save_cascade(network, tmp_path)
    loaded = load_cascade(tmp_path)
    assert loaded.config == config
    colour, points = refine_sample(loaded, *_sample(), scale=2.0)
    assert np.allclose(points, -0.4 * 2.0 / POINT_GAIN, atol=1e-6)


def _pipe(make_tiny, cascade, extra):
    components = make_tiny("act")[0]
    components.cascade = cascade
    components.info.extra = dict(extra)
    return Kinema4DPipeline(components, backend=Denoiser(components.transformer))


RELATIVE = {"first_frame": "given", "decode": "relative"}


def test_cascade_option_draws_the_frames_from_the_refined_sample(make_tiny):
    image, robot = sliding_box_robot()
    norm = PointmapNormalization((0.0, 0.0, 1.0), 2.0)
    inputs = (image, robot.rgb, robot.pointmap, robot.mask)
    plain = _pipe(make_tiny, None, RELATIVE)(*inputs, num_steps=1, pointmap_normalization=norm)
    drawn = _pipe(make_tiny, _constant(10 / 127.5, 0.5), {**RELATIVE, "cascade": "sample"})(
        *inputs, num_steps=1, pointmap_normalization=norm)
    assert np.array_equal(drawn.rgb[0], image)  # frame 0 is the observation
    expected = np.round(np.clip(image.astype(np.float32) + 10, 0, 255)).astype(np.uint8)
    assert np.array_equal(drawn.rgb[1:], np.broadcast_to(expected, drawn.rgb[1:].shape))
    assert np.allclose(drawn.pointmap[1:] - drawn.pointmap[:1], 0.5 * norm.scale / POINT_GAIN,
                       atol=1e-5)
    assert np.array_equal(drawn.pointmap[0], plain.pointmap[0])  # the sample's frame-0 points
    assert drawn.metadata["fidelity"]["cascade"] == "sample"
    # "colour": the refiner's colour, the relative decoding's points
    coloured = _pipe(make_tiny, _constant(10 / 127.5, 0.5), {**RELATIVE, "cascade": "colour"})(
        *inputs, num_steps=1, pointmap_normalization=norm)
    assert np.array_equal(coloured.rgb, drawn.rgb)
    assert np.array_equal(coloured.pointmap, plain.pointmap)
    # residual: the same sample's relative frames plus the network's constant
    added = _pipe(make_tiny, _constant(10 / 127.5, 0.5, residual=True),
                  {**RELATIVE, "cascade": "sample"})(*inputs, num_steps=1,
                                                      pointmap_normalization=norm)
    shift = added.rgb[1:].astype(int) - plain.rgb[1:].astype(int)
    inside = (plain.rgb[1:] > 12) & (plain.rgb[1:] < 243)  # away from the clip at 0 and 255
    assert np.abs(shift[inside] - 10).max() <= 1
    assert np.allclose(added.pointmap[1:] - plain.pointmap[1:], 0.5 * norm.scale / POINT_GAIN,
                       atol=1e-4)


def test_sample_given_depth_takes_the_refiners_points_where_frame_zeros_depth_is_given(
        make_tiny):
    image, robot = sliding_box_robot()
    norm = PointmapNormalization((0.0, 0.0, 1.0), 2.0)
    inputs = (image, robot.rgb, robot.pointmap, robot.mask)
    H, W = image.shape[:2]
    initial = np.zeros((H, W, 3), np.float32)  # an RGB-D frame 0 with depth on its left half
    v, u = np.mgrid[0:H, 0:W]
    initial[:, : W // 2] = np.stack([(u - W / 2) * 0.01, (v - H / 2) * 0.01,
                                     np.full((H, W), 1.5)], -1)[:, : W // 2]
    network = _constant(10 / 127.5, 0.5)

    def run(cascade: str, given: np.ndarray | None):
        return _pipe(make_tiny, network, {**RELATIVE, "cascade": cascade})(
            *inputs, num_steps=1, pointmap_normalization=norm, initial_pointmap=given)

    both = run("sample-given-depth", initial)
    refined, relative = run("sample", initial), run("colour", initial)
    assert np.array_equal(both.rgb, refined.rgb)
    off = robot.mask | robot.mask[:1]  # the robot's points are kinematics' in every mode
    left = np.zeros((H, W), bool)
    left[:, : W // 2] = True
    for t in range(1, both.pointmap.shape[0]):
        keep = ~off[t]
        assert np.array_equal(both.pointmap[t][keep & left], refined.pointmap[t][keep & left])
        assert np.array_equal(both.pointmap[t][keep & ~left],
                              relative.pointmap[t][keep & ~left])
    assert not np.array_equal(refined.pointmap[1:], relative.pointmap[1:])
    # RGB only: the relative decoding's points everywhere
    alone = run("sample-given-depth", None)
    assert np.array_equal(alone.pointmap, run("colour", None).pointmap)


def test_the_ablation_reaches_the_cascade(make_tiny):
    """Frame 0's latent repeated in place of the sample changes what the refiner draws: the
    ablation measures the transformer through it."""
    image, robot = sliding_box_robot()
    refined = _pipe(make_tiny, _constant(0.0, 0.0, residual=True),
                    {**RELATIVE, "cascade": "sample"})
    sampled = refined(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1)
    ablated = refined(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1,
                      ablation=ABLATION_FIRST_FRAME)
    assert np.array_equal(sampled.rgb[0], ablated.rgb[0])
    assert not np.array_equal(sampled.rgb[1:], ablated.rgb[1:])


def test_a_model_with_the_option_and_no_cascade_is_refused(make_tiny):
    with pytest.raises(FailedPrecondition, match="no cascade/ directory"):
        _pipe(make_tiny, None, {**RELATIVE, "cascade": "sample"})


@pytest.mark.parametrize("extra, match", [({"cascade": "yes"}, "extra.cascade"),
                                          ({"cascade": "sample"}, "needs decode 'relative'"),
                                          ({"cascade": "sample", "decode": "composite"},
                                           "needs decode 'relative'")])
def test_cascade_option_is_checked(extra, match):
    with pytest.raises(InvalidArgument, match=match):
        FidelityOptions.check(extra)


def test_model_directory_carries_the_cascade(make_tiny, tmp_path):
    components = make_tiny("act")[0]
    components.cascade = _constant(0.1, 0.0)
    save_k4d(components, tmp_path / "model")
    loaded = load_k4d(tmp_path / "model")
    assert torch.equal(loaded.cascade.head.bias, components.cascade.head.bias)
    components.cascade = None
    save_k4d(components, tmp_path / "plain")
    assert load_k4d(tmp_path / "plain").cascade is None


def test_a_refiner_of_two_samples_gets_two_independently_seeded_samples(make_tiny, tmp_path):
    image, robot = sliding_box_robot()
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    torch.manual_seed(0)
    network = SampleRefiner(CascadeConfig(channels=SMALL.channels, samples=2)).eval()
    torch.nn.init.normal_(network.head.weight, std=0.1)
    pipe = _pipe(make_tiny, network, {**RELATIVE, "cascade": "colour"})
    seen, steps = [], []
    real = cascade_module.refine_sample
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("k4d_model.pipeline.refine_sample",
                      lambda net, image, rgb, *rest: seen.append(rgb) or real(net, image, rgb,
                                                                               *rest))
        out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2, seed=5,
                   pointmap_normalization=norm, callback=lambda done, total: steps.append(
                       (done, total)))
    assert out.metadata["samples"] == 2 and steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
    rgb, _ = pipe.decoded_sample(image, robot, norm, seed=5, num_steps=2)
    stacked, points = pipe.decoded_sample(image, robot, norm, seed=5, num_steps=2, count=2)
    assert stacked.shape == (2, *rgb.shape) and points.shape == stacked.shape
    assert np.array_equal(stacked[0], rgb)  # sample 0 is the rollout's usual sample
    other, _ = pipe.decoded_sample(image, robot, norm, seed=sample_seed(5, 1), num_steps=2)
    assert np.array_equal(stacked[1], other) and not np.array_equal(other, rgb)
    assert np.array_equal(seen[0], stacked)
    save_cascade(network, tmp_path)
    assert load_cascade(tmp_path).config.samples == 2


def test_decoded_sample_is_the_rollout_before_the_output_options(make_tiny):
    image, robot = sliding_box_robot()
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    pipe = _pipe(make_tiny, None, {})
    rgb, pointmap = pipe.decoded_sample(image, robot, norm, seed=5, num_steps=1)
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1, seed=5,
               pointmap_normalization=norm)
    assert rgb.shape == pointmap.shape == out.rgb.shape
    assert np.array_equal(np.round((rgb + 1.0) * 127.5).clip(0, 255).astype(np.uint8), out.rgb)
