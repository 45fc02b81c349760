"""Names every producer and reader of a generation agrees on, defined once.

`STATIC_WORLD` is the no-model backend (the initial image with the robot composited, no
dynamics): the `backend` a caller asks for, and the model name, variant and summary id
that results carry so nobody mistakes its output for a model's. The generator, the
embedded runner, the simulator front door, `k4d up` and the evaluator's baseline all use
this one constant.
"""

STATIC_WORLD = "static-world"
