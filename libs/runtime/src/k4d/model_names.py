"""Model names every producer and reader of a generation agrees on, defined once.

`STATIC_WORLD` is the no-model backend (the initial image with the robot composited, no
dynamics): the `backend` a caller asks for (GenerateRequest.backend), and the model name,
variant and summary id that results carry so nobody mistakes its output for a model's. A
value of the contract (proto/kinema4d/v1/generator.proto), not model code: the generator, the
embedded runner, the simulator front door (no torch, no model library), `k4d up` and the
evaluator's baseline all use this one constant. A model's options are `k4d_model.options`.
"""

from __future__ import annotations

STATIC_WORLD = "static-world"
