"""The synthetic tabletop domain shared by the data engine, the policy evaluator, the evaluator
and the trainer: scenes (`scene`), scripted tasks and their physics judge (`tasks`), MuJoCo
physics of a scene with the robot's links as mocap bodies (`physics`), the pointmap success
judge (`judge`) and the scene-change rule (`scene_change`). Moved out of the runtime, which
holds only the platform (issue 46, ADR 022); before that out of k4d_datagen (issue 18)."""
